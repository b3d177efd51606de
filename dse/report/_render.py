"""Thin plotly renderers: one info NamedTuple in, one `go.Figure` out, no computation.

Every point trace carries `meta="points:<group>"` so that a test (or a user's script) can find
the plotted trials in the page's data without relying on legend text.

One file (~640 lines) on purpose: every figure of the report is one renderer of a few dozen
lines over shared styling helpers; a figure's look is changed in one place.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from dse.report._info import PHASES, ModelPoint, ParetoInfo, PointSet
from dse.report._results import fmt_quantity
from dse.report._study_info import (
    BreakdownInfo,
    ExactFrontInfo,
    HypervolumeInfo,
    ImportanceInfo,
    ParallelInfo,
)

FRONT = "#d62728"
DOMINATED = "#1f77b4"
INFEASIBLE = "#7f7f7f"
OUT_OF_RANGE = "#ff7f0e"
MODEL = "#2ca02c"  # catalogue models
COMPONENT_COLOURS = {
    "compute": "#1f77b4",
    "params": "#2ca02c",
    "param_access": "#2ca02c",
    "kv_write": "#9467bd",
    "attn_read": "#ff7f0e",
    "activations": "#17becf",
    "allreduce": "#8c564b",
    "static": "#7f7f7f",
}
OTHER_COLOURS = ("#bcbd22", "#e377c2", "#aec7e8", "#98df8a")
COMPONENT_LABELS = {
    "compute": "compute",
    "params": "weight reads",
    "param_access": "weight reads",
    "kv_write": "KV write",
    "attn_read": "attention read",
    "activations": "activations",
    "allreduce": "all-reduce",
    "static": "static",
}
LAYOUT = {
    "template": "plotly_white",
    "height": 560,
    "margin": {"l": 70, "r": 30, "t": 50, "b": 130},
    # Below the plot: long objective names in the legend would collide with the title above.
    "legend": {"orientation": "h", "yanchor": "top", "y": -0.16, "x": 0},
}


# Buttons to switch both axes between linear and logarithmic (fronts often span decades).
AXIS_SCALE_MENU = {
    "type": "buttons",
    "direction": "left",
    "x": 1.0,
    "xanchor": "right",
    "y": 1.01,
    "yanchor": "bottom",
    "showactive": True,
    "buttons": [
        {
            "label": "linear",
            "method": "relayout",
            "args": [{"xaxis.type": "linear", "yaxis.type": "linear"}],
        },
        {
            "label": "log",
            "method": "relayout",
            "args": [{"xaxis.type": "log", "yaxis.type": "log"}],
        },
    ],
}


def _errors(ps: PointSet, centre: np.ndarray, lo: np.ndarray, hi: np.ndarray, f: float) -> dict:
    ok = np.isfinite(lo) & np.isfinite(hi)
    if not ok.any():
        return {"visible": False}
    return {
        "type": "data",
        "symmetric": False,
        "array": np.where(ok, (hi - centre) * f, 0.0),
        "arrayminus": np.where(ok, (centre - lo) * f, 0.0),
        "thickness": 1,
        "width": 3,
        "color": "rgba(214, 39, 40, 0.45)",  # FRONT, lighter: bands sit behind the markers
    }


def _scatter(ps: PointSet, fx: float, fy: float, cloud: bool = False, **kw: object) -> go.Scatter:
    x, y = ps.x * fx, ps.y * fy
    if cloud:  # float32 (7 digits) halves the cloud's encoded coordinates; plenty to draw
        x, y = x.astype(np.float32), y.astype(np.float32)
    return go.Scatter(
        x=x,
        y=y,
        hovertext=ps.hover,
        hovertemplate="%{hovertext}<extra></extra>",
        **kw,
    )


LOG_AUTO_TICKS = 1.0  # decades


def _log_ticks(values: np.ndarray) -> dict:
    """Log-axis ticks that read: 1-2-5 labels within a few decades, one per decade beyond,
    plain numbers (~g), minor ticks unlabelled; plotly's own ticks and no minor ones under
    LOG_AUTO_TICKS decades (TPOT from 5.7 to 23 ms would get two labels, 10 and 20; a loss
    from 2.05 to 2.09 none)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    decades = float(np.log10(v.max() / v.min())) if len(v) > 1 else 0.0
    if decades < LOG_AUTO_TICKS:
        return {"dtick": None, "tickformat": "~g", "minor": {"ticks": "", "showgrid": False}}
    return {
        "dtick": "D2" if decades <= 2.5 else 1,
        "tickformat": "~g",
        "minor": {"ticks": "outside", "showgrid": True, "gridcolor": "#f0f0f0"},
    }


def _scale_menu(
    active_log: bool,
    xt: dict,
    yt: dict,
    x_range: list[float] | None,
    y_range: list[float] | None,
) -> dict:
    """AXIS_SCALE_MENU with the log ticks set on switching to log (and cleared on linear), and
    the study's axis ranges kept in either scale (autorange where log cannot show a range)."""
    log: dict[str, object] = {"xaxis.type": "log", "yaxis.type": "log"}
    lin: dict[str, object] = {"xaxis.type": "linear", "yaxis.type": "linear"}
    for axis, t, rng in (("xaxis", xt, x_range), ("yaxis", yt, y_range)):
        log[f"{axis}.dtick"] = t["dtick"]
        log[f"{axis}.tickformat"] = t["tickformat"]
        log[f"{axis}.minor"] = t["minor"]
        lin[f"{axis}.dtick"] = None
        lin[f"{axis}.tickformat"] = ""
        lin[f"{axis}.minor"] = {"ticks": "", "showgrid": False}
        if rng is None:
            log[f"{axis}.autorange"] = lin[f"{axis}.autorange"] = True
            continue
        lin[f"{axis}.range"] = list(rng)
        if rng[0] > 0:
            log[f"{axis}.range"] = [float(np.log10(rng[0])), float(np.log10(rng[1]))]
        else:
            log[f"{axis}.autorange"] = True
    menu = {**AXIS_SCALE_MENU, "active": 1 if active_log else 0}
    menu["buttons"] = [
        {"label": "linear", "method": "relayout", "args": [lin]},
        {"label": "log", "method": "relayout", "args": [log]},
    ]
    return menu


def _colour_marker(ps: PointSet, lo: float, hi: float, fc: float) -> dict:
    """Marker colours of a point set from its colour objective, on the figure's shared scale."""
    assert ps.colour is not None
    return {"color": ps.colour * fc, "cmin": lo, "cmax": hi, "colorscale": "Viridis"}


def pareto_figure(info: ParetoInfo, controls: bool = True) -> go.Figure:
    """The Pareto figure of one pair of objectives. `controls=False` leaves out the linear /
    log buttons (a static image cannot use them)."""
    fx, fy = info.x.factor, info.y.factor
    fig = go.Figure()
    n_inf, n_dom, n_front = len(info.infeasible.x), len(info.dominated.x), len(info.front.x)
    coloured = info.colour is not None and info.study_front is not None
    fc = info.colour.factor if info.colour is not None else 1.0
    c_lo = c_hi = 0.0
    if coloured:
        sets = (info.front, info.dominated, info.study_front)
        cs = np.concatenate([p.colour for p in sets if p is not None and p.colour is not None])
        cs = cs[np.isfinite(cs)] * fc
        c_lo, c_hi = (float(cs.min()), float(cs.max())) if len(cs) else (0.0, 1.0)
    fig.add_trace(
        _scatter(
            info.infeasible,
            fx,
            fy,
            mode="markers",
            cloud=True,
            name=f"infeasible ({n_inf:,})",
            meta="points:infeasible",
            marker={
                "symbol": "x-thin",
                "size": 6,
                "color": INFEASIBLE,
                "line": {"width": 1, "color": INFEASIBLE},
            },
            opacity=0.55,
        )
    )
    fig.add_trace(
        _scatter(
            info.dominated,
            fx,
            fy,
            mode="markers",
            cloud=True,
            name=f"feasible, dominated ({n_dom:,})",
            meta="points:dominated",
            marker=(
                {"size": 6, **_colour_marker(info.dominated, c_lo, c_hi, fc)}
                if coloured
                else {"size": 6, "color": DOMINATED}
            ),
            opacity=0.35 if coloured else 0.3,
        )
    )
    if coloured:
        assert info.study_front is not None and info.colour is not None
        fig.add_trace(
            _scatter(
                info.study_front,
                fx,
                fy,
                mode="markers",
                name=info.study_front_name,
                meta="points:study_front",
                marker={
                    "size": 10,
                    **_colour_marker(info.study_front, c_lo, c_hi, fc),
                    "line": {"width": 1, "color": "black"},
                    "showscale": True,
                    "colorbar": {"title": {"text": info.colour.title, "side": "right"}},
                },
            )
        )
    # The front of the two axes: filled red points with 2 objectives; with more, red rings
    # around the coloured study-front markers, so that their colour stays visible.
    front_marker = (
        {
            "size": 16,
            "color": FRONT,
            "symbol": _front_symbols(info.front, "circle-open", "diamond-open"),
            "line": {"width": 2.5, "color": FRONT},
        }
        if coloured
        else {
            "size": 9,
            "color": FRONT,
            "line": {"width": 1, "color": "white"},
            # Hollow: indistinguishable from a neighbour within the predictor's band.
            "symbol": _front_symbols(info.front, "circle", "circle-open"),
        }
    )
    fig.add_trace(
        _scatter(
            info.front,
            fx,
            fy,
            mode="lines+markers",
            name=info.front_name,
            meta="points:front",
            marker=front_marker,
            # A staircase through the region the front dominates: each corner is worse than
            # both its neighbours; horizontal first when x is minimised, vertical when not.
            line={
                "color": FRONT,
                "width": 2,
                "shape": "vh" if info.directions[0] == "maximize" else "hv",
            },
            error_x=_errors(info.front, info.front.x, info.front.x_lo, info.front.x_hi, fx),
            error_y=_errors(info.front, info.front.y, info.front.y_lo, info.front.y_hi, fy),
        )
    )
    # Rings on front points outside the fitted range, only when some front points are inside
    # it: a ring on every point says nothing (the header then says all are outside).
    flagged = info.front.out_of_range
    if flagged.any() and not flagged.all():
        xs = info.front.x[flagged] * fx
        ys = info.front.y[flagged] * fy
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="markers",
                name=f"outside fitted range ({len(xs):,})",
                meta="marks:out_of_range",
                marker={
                    "symbol": "circle-open",
                    "size": 20 if coloured else 12,
                    "color": OUT_OF_RANGE,
                    "line": {"width": 1.5},
                },
                opacity=0.7,
                hoverinfo="skip",
            )
        )
    # One trace per marked trial, labelled beside its marker where no feasible trial can be:
    # left of the fastest (nothing feasible is faster), below the most frugal, and above right
    # of the knee, over the faint dominated cloud. Text, unlike arrows in pixels, stays put when
    # the axes switch to log. The on-plot text is short; the legend names the objectives.
    by_trial: dict[int, list] = {}
    for m in info.marks:
        by_trial.setdefault(m.number, []).append(m)
    best_x = f"best {info.x.objective.label}"
    for number, ms in by_trial.items():
        names = [m.label for m in ms]
        is_knee = "knee" in names
        if is_knee:
            position = "top right"
        elif best_x in names:
            position = "middle left"
        else:
            position = "bottom center"
        fig.add_trace(
            go.Scatter(
                x=[ms[0].x * fx],
                y=[ms[0].y * fy],
                mode="markers+text",
                text=[f"{' · '.join(m.short or m.label for m in ms)} #{number}"],
                textposition=position,
                textfont={"size": 11},
                cliponaxis=False,
                name=f"{' · '.join(names)} (#{number})",
                meta="marks:" + ",".join(names),
                marker={
                    "symbol": "star" if is_knee else "diamond",
                    "size": 16 if is_knee else 12,
                    "color": "gold" if is_knee else "black",
                    "line": {"width": 1, "color": "black"},
                },
                hovertemplate=f"{' · '.join(names)}: trial {number}<extra></extra>",
            )
        )
    _add_models(fig, info, fx, fy)
    if not n_front:
        fig.add_annotation(
            text="no feasible trial",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.95,
            showarrow=False,
            font={"size": 16, "color": FRONT},
        )
    sets = [info.front, info.dominated, info.infeasible]
    if info.study_front is not None:
        sets.append(info.study_front)
    allx = np.concatenate([p.x for p in sets]) * fx
    ally = np.concatenate([p.y for p in sets]) * fy
    xt, yt = _log_ticks(allx), _log_ticks(ally)
    x_range = [info.x_range[0] * fx, info.x_range[1] * fx] if info.x_range else None
    y_range = [info.y_range[0] * fy, info.y_range[1] * fy] if info.y_range else None
    title = f"{info.y.objective.label} against {info.x.objective.label}"
    if info.colour is not None:
        title += f"; colour: {info.colour.objective.label}"
    layout = {**LAYOUT, "margin": {**LAYOUT["margin"], "t": 85}} if controls else LAYOUT
    fig.update_layout(
        title=title,
        xaxis_title=info.x.title,
        yaxis_title=info.y.title,
        updatemenus=[_scale_menu(info.log_axes, xt, yt, x_range, y_range)] if controls else [],
        **layout,  # with controls: room for the scale buttons
    )
    if info.log_axes:
        fig.update_xaxes(type="log", **xt)
        fig.update_yaxes(type="log", **yt)
    for axis, rng in ((fig.update_xaxes, x_range), (fig.update_yaxes, y_range)):
        if rng is not None:
            axis(range=[float(np.log10(v)) for v in rng] if info.log_axes else rng)
    return fig


def _front_symbols(ps: PointSet, plain: str, close: str) -> list[str] | str:
    if ps.indistinguishable is None or not ps.indistinguishable.any():
        return plain
    return [close if v else plain for v in ps.indistinguishable]


MAX_MODEL_MARKS = 24
OFF_AXIS_ARROW_PX = 55  # length of the arrow to a catalogue model off the axes


def _add_models(fig: go.Figure, info: ParetoInfo, fx: float, fy: float) -> None:
    """Catalogue models as labelled squares: filled when no front point dominates them. Each
    model's name is written once (on its first undominated placement, else its first). A
    model off the axes is an arrow on the edge, labelled with its name and value there."""
    models = list(info.models)[:MAX_MODEL_MARKS]
    inside = [m for m in models if not m.off]
    for m in models:
        if m.off:
            fig.add_annotation(**_off_axis(m, info, fx, fy))
    if not inside:
        return
    named: dict[str, int] = {}
    for i, m in enumerate(inside):
        base = m.label.split(" · ")[0]
        if base not in named or (m.dominated_by < 0 <= inside[named[base]].dominated_by):
            named[base] = i
    text = [""] * len(inside)
    for base, i in named.items():
        text[i] = base
    fig.add_trace(
        go.Scatter(
            x=[m.x * fx for m in inside],
            y=[m.y * fy for m in inside],
            mode="markers+text",
            text=text,
            textposition="bottom right",
            textfont={"size": 11, "color": MODEL},
            cliponaxis=False,
            name=f"catalogue models ({len(inside)})",
            meta="marks:models",
            marker={
                "symbol": ["square" if m.dominated_by < 0 else "square-open" for m in inside],
                "size": 10,
                "color": MODEL,
                "line": {"width": 1.5, "color": MODEL},
            },
            hovertext=[m.hover for m in inside],
            hovertemplate="%{hovertext}<extra></extra>",
        )
    )


def _off_axis(m: ModelPoint, info: ParetoInfo, fx: float, fy: float) -> dict:
    """An annotation whose arrow points at the edge the model lies beyond, at its other
    coordinate (clamped to the edge when it is off both axes); text: its name and the value
    off the axis. Data coordinates are log10 on log axes (plotly converts them on a switch)."""

    def coord(v: float, f: float, side: int) -> tuple[float, str]:
        if side:
            return (1.0 if side > 0 else 0.0), "paper"
        return (float(np.log10(v * f)) if info.log_axes else v * f), ""

    x, xref = coord(m.x, fx, m.off_x)
    y, yref = coord(m.y, fy, m.off_y)
    values = []
    if m.off_x:
        values.append(f"{info.x.objective.short} {fmt_quantity(m.x, info.x.objective.unit)}")
    if m.off_y:
        values.append(f"{info.y.objective.short} {fmt_quantity(m.y, info.y.objective.unit)}")
    return {
        "x": x,
        "y": y,
        "xref": xref or "x",
        "yref": yref or "y",
        "text": f"{m.label.split(' · ')[0]}: {', '.join(values)}",
        "hovertext": m.hover,
        "showarrow": True,
        "arrowhead": 2,
        "arrowcolor": MODEL,
        "ax": -OFF_AXIS_ARROW_PX * m.off_x,
        "ay": OFF_AXIS_ARROW_PX * m.off_y,  # pixels, downward: text below an edge above
        # The text ends where the arrow starts, so the whole arrow shows.
        "xanchor": {1: "right", -1: "left"}.get(m.off_x, "center"),
        "yanchor": {1: "top", -1: "bottom"}.get(m.off_y, "middle"),
        "font": {"size": 11, "color": MODEL},
        "bgcolor": "rgba(255, 255, 255, 0.8)",
        "name": f"off-axis model: {m.label}",
    }


def parallel_figures(info: ParallelInfo) -> list[go.Figure]:
    figs = []
    dims = [
        {
            "label": d.label,
            "values": d.values,
            **({"tickvals": d.tickvals, "ticktext": d.ticktext} if d.tickvals is not None else {}),
        }
        for d in info.dimensions
    ]
    for axis, values in info.colours:
        v = values * axis.factor
        figs.append(
            go.Figure(
                go.Parcoords(
                    dimensions=[
                        *dims,
                        {"label": f"{axis.objective.label} ({axis.unit_label})", "values": v},
                    ],
                    line={
                        "color": v,
                        "colorscale": "Viridis",
                        "showscale": True,
                        "colorbar": {"title": {"text": axis.unit_label}},
                    },
                )
            ).update_layout(
                title=f"Parameters coloured by {axis.objective.label} ({info.n_rows:,} trials)",
                template="plotly_white",
                height=460,
                margin={"l": 70, "r": 70, "t": 90, "b": 40},
            )
        )
    return figs


def importance_figure(info: ImportanceInfo) -> go.Figure:
    fig = go.Figure()
    # Most important (largest over the objectives) at the top: plotly draws the first bar lowest.
    params = sorted(
        {p for imp in info.importances.values() for p in imp},
        key=lambda p: max(imp.get(p, 0.0) for imp in info.importances.values()),
    )
    for label, imp in info.importances.items():
        fig.add_trace(
            go.Bar(
                y=params,
                x=[imp.get(p, 0.0) for p in params],
                orientation="h",
                name=label,
                hovertemplate="%{y}: %{x:.3f}<extra>" + label + "</extra>",
            )
        )
    fig.update_layout(
        title=f"Parameter importance per objective — {info.method}",
        xaxis_title="importance (sums to 1 per objective)",
        barmode="group",
        **{**LAYOUT, "height": max(300, 90 + 40 * len(params) * max(len(info.importances), 1))},
    )
    return fig


def hypervolume_figure(info: HypervolumeInfo) -> go.Figure:
    fig = go.Figure(
        go.Scatter(
            x=info.n_trials,
            y=info.hypervolume,
            mode="lines+markers",
            name="sampler's front",
            meta="points:hypervolume",
        )
    )
    if info.exact is not None:
        fig.add_hline(
            y=info.exact,
            line_dash="dash",
            line_color="black",
            annotation_text=f"exact front {info.exact:.4g}",
        )
    fig.update_layout(
        title="Hypervolume against trials (normalised objectives)",
        xaxis_title="trials",
        yaxis_title="hypervolume",
        **LAYOUT,
    )
    return fig


def exact_front_figure(info: ExactFrontInfo) -> go.Figure:
    fx, fy = info.x.factor, info.y.factor
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=info.exact_x * fx,
            y=info.exact_y * fy,
            mode="lines+markers",
            name=f"exact front ({len(info.exact_x):,})",
            meta="points:exact",
            line={"color": "black", "dash": "dot", "shape": "hv"},
            marker={"size": 11, "symbol": "circle-open", "color": "black"},
        )
    )
    fig.add_trace(
        go.Scatter(
            x=info.sampler_x * fx,
            y=info.sampler_y * fy,
            mode="markers",
            name=f"sampler's front ({len(info.sampler_x):,})",
            meta="points:sampler",
            marker={"size": 7, "color": FRONT},
        )
    )
    fig.update_layout(
        title=f"Sampler's front against the exact front: {info.n_found} of "
        f"{len(info.exact_x)} exact points found",
        xaxis_title=info.x.title,
        yaxis_title=info.y.title,
        **LAYOUT,
    )
    return fig


def breakdown_figures(info: BreakdownInfo) -> list[go.Figure]:
    f, unit = info.unit
    figs = []
    if info.t2wh:
        fig = go.Figure()
        comps = list(dict.fromkeys(c for c, _ in info.t2wh))
        others = iter(OTHER_COLOURS * 4)
        for comp in comps:
            colour = COMPONENT_COLOURS.get(comp) or next(others)
            label = COMPONENT_LABELS.get(comp, comp.replace("_", " "))
            for ph in PHASES:
                v = info.t2wh.get((comp, ph))
                if v is None:
                    continue
                fig.add_trace(
                    go.Bar(
                        x=info.labels,
                        y=v * f,
                        name=f"{label} · {ph}",
                        legendgroup=comp,
                        marker={
                            "color": colour,
                            "pattern": {"shape": "/" if ph == "prefill" else ""},
                        },
                        hovertemplate=f"%{{x}} {label} ({ph}): %{{y:.4g}} {unit}<extra></extra>",
                    )
                )
        fig.update_layout(
            title="Energy of front points by component (tokens-to-Wh; hatched: prefill)",
            barmode="stack",
            xaxis_title="front point (trial number, by increasing first objective)",
            yaxis_title=f"energy per request ({unit})",
            **LAYOUT,
        )
        figs.append(fig)
    fig = go.Figure()
    if info.hymell_total is not None and info.t2wh_total is not None:
        fig.add_trace(go.Bar(x=info.labels, y=info.hymell_total * f, name="HYMELL"))
        fig.add_trace(go.Bar(x=info.labels, y=info.t2wh_total * f, name="tokens-to-Wh"))
        fig.update_layout(
            title="HYMELL and tokens-to-Wh energy of the front points", barmode="group"
        )
    elif info.hymell is not None:
        for ph in PHASES:
            fig.add_trace(go.Bar(x=info.labels, y=info.hymell[ph] * f, name=f"HYMELL {ph}"))
        fig.update_layout(
            title="HYMELL energy of the front points, prefill and decode", barmode="stack"
        )
    else:
        return figs
    fig.update_layout(
        xaxis_title="front point (trial number, by increasing first objective)",
        yaxis_title=f"energy per request ({unit})",
        **LAYOUT,
    )
    figs.append(fig)
    return figs
