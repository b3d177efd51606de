"""Thin plotly renderers: one info NamedTuple in, one `go.Figure` out, no computation.

Every point trace carries `meta="points:<group>"` so that a test (or a user's script) can find
the plotted trials in the page's data without relying on legend text.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from dse.report._info import (
    PHASES,
    Axis,
    BreakdownInfo,
    ColourInfo,
    ExactFrontInfo,
    HypervolumeInfo,
    ImportanceInfo,
    ModelMark,
    ParallelInfo,
    ParetoInfo,
    PointSet,
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


def _log_ticks(values: np.ndarray) -> dict:
    """Log-axis ticks that read: 1-2-5 labels within a few decades, one per decade beyond,
    plain numbers (~g), minor ticks unlabelled."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    decades = float(np.log10(v.max() / v.min())) if len(v) > 1 else 0.0
    return {
        "dtick": "D2" if decades <= 2.5 else 1,
        "tickformat": "~g",
        "minor": {"ticks": "outside", "showgrid": True, "gridcolor": "#f0f0f0"},
    }


def _scale_menu(active_log: bool, xt: dict, yt: dict) -> dict:
    """AXIS_SCALE_MENU with the log ticks set on switching to log (and cleared on linear)."""
    log = {"xaxis.type": "log", "yaxis.type": "log"}
    lin = {"xaxis.type": "linear", "yaxis.type": "linear"}
    for axis, t in (("xaxis", xt), ("yaxis", yt)):
        log[f"{axis}.dtick"] = t["dtick"]
        log[f"{axis}.tickformat"] = t["tickformat"]
        lin[f"{axis}.dtick"] = None
        lin[f"{axis}.tickformat"] = ""
    menu = {**AXIS_SCALE_MENU, "active": 1 if active_log else 0}
    menu["buttons"] = [
        {"label": "linear", "method": "relayout", "args": [lin]},
        {"label": "log", "method": "relayout", "args": [log]},
    ]
    return menu


def _short(axis: Axis) -> str:
    """'latency', 'energy', 'params' or 'KV bytes': what an objective is, in one word."""
    name = axis.objective.name
    if name.startswith(("latency", "energy")):
        return name.split("_")[0]
    return "KV bytes" if name.startswith("kv") else "params"


def pareto_figure(info: ParetoInfo, models: Sequence[ModelMark] = ()) -> go.Figure:
    fx, fy = info.x.factor, info.y.factor
    fig = go.Figure()
    n_inf, n_dom, n_front = len(info.infeasible.x), len(info.dominated.x), len(info.front.x)
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
            marker={"size": 6, "color": DOMINATED},
            opacity=0.3,
        )
    )
    fig.add_trace(
        _scatter(
            info.front,
            fx,
            fy,
            mode="lines+markers",
            name=f"Pareto front ({n_front:,})",
            meta="points:front",
            # Hollow: indistinguishable from a neighbour within the predictor's band.
            marker={
                "size": 9,
                "color": FRONT,
                "line": {"width": 1, "color": "white"},
                "symbol": _front_symbols(info.front),
            },
            line={"color": FRONT, "width": 2, "shape": "hv"},
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
                    "size": 12,
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
    best_y = f"best {info.y.objective.label}"
    short = {"knee": "knee", best_x: f"best {_short(info.x)}", best_y: f"best {_short(info.y)}"}
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
                text=[f"{' · '.join(short.get(n, n) for n in names)} #{number}"],
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
    _add_models(fig, models, fx, fy)
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
    allx = np.concatenate([info.front.x, info.dominated.x, info.infeasible.x]) * fx
    ally = np.concatenate([info.front.y, info.dominated.y, info.infeasible.y]) * fy
    xt, yt = _log_ticks(allx), _log_ticks(ally)
    fig.update_layout(
        title=f"{info.y.objective.label} against {info.x.objective.label}",
        xaxis_title=info.x.title,
        yaxis_title=info.y.title,
        updatemenus=[_scale_menu(info.log_axes, xt, yt)],
        **{**LAYOUT, "margin": {**LAYOUT["margin"], "t": 85}},  # room for the scale buttons
    )
    if info.log_axes:
        fig.update_xaxes(type="log", **xt)
        fig.update_yaxes(type="log", **yt)
    return fig


def _front_symbols(ps: PointSet) -> list[str] | str:
    if ps.indistinguishable is None or not ps.indistinguishable.any():
        return "circle"
    return ["circle-open" if v else "circle" for v in ps.indistinguishable]


MAX_MODEL_MARKS = 24


def _add_models(fig: go.Figure, models: Sequence[ModelMark], fx: float, fy: float) -> None:
    """Catalogue models as labelled squares: filled when no front point dominates them. Each
    model's name is written once (on its first undominated placement, else its first)."""
    models = list(models)[:MAX_MODEL_MARKS]
    if not models:
        return
    named: dict[str, int] = {}
    for i, m in enumerate(models):
        base = m.label.split(" · ")[0]
        if base not in named or (m.dominated_by < 0 <= models[named[base]].dominated_by):
            named[base] = i
    text = [""] * len(models)
    for base, i in named.items():
        text[i] = base
    fig.add_trace(
        go.Scatter(
            x=[m.x * fx for m in models],
            y=[m.y * fy for m in models],
            mode="markers+text",
            text=text,
            textposition="bottom right",
            textfont={"size": 11, "color": MODEL},
            cliponaxis=False,
            name=f"catalogue models ({len(models)})",
            meta="marks:models",
            marker={
                "symbol": ["square" if m.dominated_by < 0 else "square-open" for m in models],
                "size": 10,
                "color": MODEL,
                "line": {"width": 1.5, "color": MODEL},
            },
            hovertext=[m.hover for m in models],
            hovertemplate="%{hovertext}<extra></extra>",
        )
    )


def colour_figure(info: ColourInfo) -> go.Figure:
    fx, fy, fc = info.x.factor, info.y.factor, info.colour.factor
    c = info.colour_values * fc
    lo, hi = float(np.nanmin(c)), float(np.nanmax(c))
    fig = go.Figure()
    for on, name, size, line in (
        (~info.on_front, "feasible", 6, {"width": 0}),
        (info.on_front, "on the 3-objective front", 10, {"width": 1.5, "color": "black"}),
    ):
        if not on.any():
            continue
        fig.add_trace(
            go.Scatter(
                x=info.points.x[on] * fx,
                y=info.points.y[on] * fy,
                mode="markers",
                name=f"{name} ({int(on.sum()):,})",
                meta=f"points:{'front' if size == 10 else 'feasible'}",
                hovertext=[h for h, keep in zip(info.points.hover, on, strict=True) if keep],
                hovertemplate="%{hovertext}<extra></extra>",
                marker={
                    "size": size,
                    "color": c[on],
                    "cmin": lo,
                    "cmax": hi,
                    "colorscale": "Viridis",
                    "line": line,
                    "showscale": size == 10 or not info.on_front.any(),
                    "colorbar": {"title": {"text": info.colour.title, "side": "right"}},
                },
                opacity=1.0 if size == 10 else 0.5,
            )
        )
    fig.update_layout(
        title=f"Three objectives: colour is {info.colour.objective.label}",
        xaxis_title=info.x.title,
        yaxis_title=info.y.title,
        **LAYOUT,
    )
    return fig


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
