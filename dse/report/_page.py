"""The report page: figures rendered into one self-contained HTML file (plotly.js inline)."""

from __future__ import annotations

import html
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import plotly.graph_objects as go
import plotly.offline

from dse.errors import ImageExportError
from dse.report import _header_info as IH
from dse.report import _info as I
from dse.report import _render as R
from dse.report import _study_info as IS
from dse.report._files import write_text_atomic
from dse.report._results import Results, load_results

PLOT_CONFIG = {"displaylogo": False, "responsive": True}

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 0 auto;
       max-width: 1200px; padding: 0 24px 48px; color: #222; }
h1 { margin: 24px 0 8px; font-size: 26px; }
h2 { margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; font-size: 20px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f5f5f5; }
.header th { width: 120px; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 8px 12px; margin: 8px 0;
        border-radius: 4px; }
.note { color: #555; font-size: 13px; margin: 4px 0; }
.missing { color: #777; font-style: italic; }
code { background: #f3f3f3; padding: 1px 4px; border-radius: 3px; }
"""


class Section(NamedTuple):
    anchor: str
    title: str
    caption: str
    figures: list[tuple[str, go.Figure]]  # (div id, figure)
    notes: list[str]
    missing: str = ""  # why the section has no figure


N_STAGES = 6  # calls of `stage`: five in build_sections, then one in render_html


class Stages:
    """A line on stderr as each stage of the report starts ("report 2/6: Pareto figures
    (1.4 s)", the time since the first stage), so that a slow stage shows what it is doing."""

    def __init__(self, total: int = N_STAGES) -> None:
        self.total = total
        self.done = 0
        self.start = time.perf_counter()

    def __call__(self, what: str) -> None:
        self.done += 1
        elapsed = time.perf_counter() - self.start
        print(
            f"report {self.done}/{self.total}: {what} ({elapsed:.1f} s)",
            file=sys.stderr,
            flush=True,
        )


def _quiet(what: str) -> None:
    del what


def pareto_caption(pi: I.ParetoInfo) -> str:
    """What the first Pareto figure shows."""
    what = f"{pi.y.objective.label} against {pi.x.objective.label}" + (
        f", coloured by {pi.colour.objective.label}" if pi.colour is not None else ""
    )
    models = bool(pi.models)
    front = (
        "The front is highlighted and connected (hollow: indistinguishable from a neighbour "
        "within the predictor's band); feasible dominated configurations are faint dots"
        if pi.colour is None
        else "Red rings connected by a line are the front of these two objectives alone "
        "(diamond rings: indistinguishable from a neighbour within the predictor's band); "
        "outlined points are the study's front in all its objectives, faint dots the other "
        "feasible configurations, all coloured by the next objective"
    )
    return (
        f"{what}, one point per distinct configuration. {front}; infeasible ones are grey "
        "crosses; orange rings mark front points outside the predictor's fitted range (none "
        "when every front point is)"
        + ("; error bars are the predictor's band" if pi.has_bands else "")
        + (
            "; green squares are catalogue models that fit the space's fixed fields, "
            "evaluated like a trial (filled: no front point dominates them; an arrow on an "
            "edge points to one off the axes, which are set by the study's points)"
            if models
            else ""
        )
        + ". The knee (star) is the front point farthest from the line through the front's "
        "extremes, objectives normalised over the front; diamonds mark the best trial of each "
        "objective on the axes. Hover a point for its parameters and its predicted breakdown"
        + (
            "; the axes start logarithmic because the trials span more than a factor "
            f"{I.LOG_AXES_SPAN:g} (switch with the buttons)."
            if pi.log_axes
            else "."
        )
    )


def build_sections(res: Results, stage: Callable[[str], None] = _quiet) -> list[Section]:
    """Every section of the report, in page order; `stage(name)` is called as each stage
    starts (N_STAGES - 1 calls; render_html makes the last)."""
    stage("catalogue models")
    models, model_note = I.model_marks(res)
    stage("Pareto figures")
    pairs = I.objective_pairs(res)
    infos = [I.pareto_info(res, pair, models) for pair in pairs]
    pi = infos[0]
    notes = list(pi.notes) + ([model_note] if model_note else [])
    sections = [
        Section(
            "pareto",
            "Pareto front",
            pareto_caption(pi),
            [("pareto", R.pareto_figure(pi))],
            notes,
        )
    ]
    if len(infos) > 1:
        sections.append(
            Section(
                "pairs",
                "Other pairs of objectives",
                "The other pairs of the study's objectives, each with the remaining one as "
                "colour; red: the front of the pair alone, outlined: the study's front.",
                [(f"pareto-{n}", R.pareto_figure(p)) for n, p in enumerate(infos[1:], 1)],
                [
                    f"{p.y.objective.label} against {p.x.objective.label}: {n}"
                    for p in infos[1:]
                    for n in p.notes
                    if n.startswith(I.OFF_AXES_NOTE)
                ],
            )
        )
    stage("parallel coordinates")
    par = IS.parallel_info(res)
    sections.append(
        Section(
            "parallel",
            "Parameters",
            "Parallel coordinates of the parameters that vary, one figure per objective; drag "
            "along an axis to filter.",
            [(f"parallel-{i}", f) for i, f in enumerate(R.parallel_figures(par))] if par else [],
            par.notes if par else [],
            "" if par else "no parameter varies across the trials",
        )
    )
    stage("parameter importance")
    imp = IS.importance_info(res)
    sections.append(
        Section(
            "importance",
            "Parameter importance",
            "How much each parameter decides each objective over the feasible trials "
            "(Optuna's PED-ANOVA on a study rebuilt from the trials; η², the share of variance "
            "explained, when there are too few trials).",
            [("importance", R.importance_figure(imp))] if imp and imp.importances else [],
            imp.notes if imp else [],
            ""
            if imp and imp.importances
            else ("fewer than two parameters vary" if imp is None else "; ".join(imp.notes)),
        )
    )
    stage("hypervolume and energy breakdown")
    sampler = str(res.summary.get("sampler", "?"))
    hv = IS.hypervolume_info(res)
    sections.append(
        Section(
            "hypervolume",
            "Hypervolume against trials",
            "Hypervolume of the front found after each number of trials, objectives normalised "
            "by the ideal and nadir points of summary.json"
            + (" (dashed: the exact front)." if hv and hv.exact is not None else "."),
            [("hypervolume", R.hypervolume_figure(hv))] if hv else [],
            [],
            ""
            if hv
            else (
                f"sampler {sampler} evaluates every configuration once, so the curve would "
                "only show the order they were stored in; the header gives the exact front's "
                "hypervolume"
                if IS.enumerated(res)
                else "the sweep recorded no hypervolume history (summary.json)"
            ),
        )
    )
    ex = IS.exact_front_info(res)
    if ex is not None or (res.exact_front is not None and IS.enumerated(res)):
        sections.append(
            Section(
                "exact",
                "Sampler's front against the exact front",
                "The exact front comes from evaluating every configuration of the space "
                "(exact_front.csv).",
                [("exact-front", R.exact_front_figure(ex))] if ex else [],
                [],
                ""
                if ex
                else f"sampler {sampler} evaluated every configuration: its front is the exact "
                "front",
            )
        )
    bd = IS.breakdown_info(res)
    sections.append(
        Section(
            "energy",
            "Where the energy goes",
            "Energy per request of the front points split into components (tokens-to-Wh: "
            "compute, weight reads, KV-cache writes, attention reads, static power; prefill "
            "hatched, decode plain), and the HYMELL and tokens-to-Wh estimates side by side.",
            [(f"breakdown-{i}", f) for i, f in enumerate(R.breakdown_figures(bd))] if bd else [],
            bd.notes if bd else [],
            "" if bd else "no feasible front point to break down",
        )
    )
    return sections


def _header_html(h: IH.HeaderInfo) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in h.rows
    )
    fixed = ", ".join(f"{k}={v}" for k, v in h.fixed.items())
    warns = "".join(f'<div class="warn">{html.escape(w)}</div>' for w in h.warnings)
    return (
        f"<h1>{html.escape(h.title)}</h1>{warns}"
        f'<table class="header">{rows}'
        f"<tr><th>fixed fields</th><td>{html.escape(fixed) or 'none'}</td></tr>"
        f"<tr><th>reproduce</th><td><code>{html.escape(h.reproduce)}</code></td></tr></table>"
    )


def _table_html(t: IH.FrontTable) -> str:
    if not t.rows:
        return '<p class="missing">The front is empty: no feasible trial.</p>'
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in t.rows
    )
    more = (
        f'<p class="note">First {len(t.rows)} of {t.n_total} front points.</p>'
        if t.n_total > len(t.rows)
        else ""
    )
    close = (
        '<p class="note">≈ indistinguishable: a front neighbour (next in the first objective) '
        "lies inside this point's predicted error band in every objective, or this one inside "
        "its; the predictor cannot tell the two apart. <code>trials</code>: how many trials "
        "hit the configuration.</p>"
        if any(r[0].endswith("≈") for r in t.rows)
        else '<p class="note"><code>trials</code>: how many trials hit the configuration.</p>'
    )
    return f"<table><tr>{head}</tr>{body}</table>{more}{close}"


def render_html(res: Results, stage: Callable[[str], None] = _quiet) -> str:
    """The whole report as one HTML string (plotly.js embedded, works offline); `stage(name)`
    is called as each of its N_STAGES stages starts (`Stages` prints them)."""
    header = IH.header_info(res)
    parts = [_header_html(header)]
    nav = []
    sections = build_sections(res, stage)
    stage("page (figures to HTML, plotly.js inline)")
    for s in sections:
        # Section anchors are prefixed: plotly finds each figure's div by its bare id.
        nav.append(f'<a href="#sec-{s.anchor}">{html.escape(s.title)}</a>')
        parts.append(f'<h2 id="sec-{s.anchor}">{html.escape(s.title)}</h2>')
        parts.append(f'<p class="note">{html.escape(s.caption)}</p>')
        parts.extend(f'<p class="note">Note: {html.escape(n)}.</p>' for n in s.notes)
        if s.missing:
            parts.append(f'<p class="missing">Not shown: {html.escape(s.missing)}.</p>')
        for div_id, fig in s.figures:
            parts.append(
                fig.to_html(
                    full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG
                )
            )
    nav.append('<a href="#sec-front-table">Front table</a>')
    parts.append('<h2 id="sec-front-table">Front table</h2>')
    parts.append(_table_html(IH.front_table(res)))
    parts.insert(1, '<p class="note">' + " · ".join(nav) + "</p>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(header.title)}</title>"
        f"<style>{STYLE}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script>'
        "</head><body>" + "\n".join(parts) + "</body></html>\n"
    )


def write_report(
    results_dir: str | Path, out: str | Path | None = None, progress: bool = False
) -> Path:
    """Write the HTML report of a results folder; returns its path (default RESULTS_DIR/report.html).
    `progress`: a line on stderr as each stage starts.

    Raises ResultsError (a DSEError) for a missing, empty or older-format folder.
    """
    res = load_results(results_dir)
    path = Path(out) if out is not None else res.path / "report.html"
    text = render_html(res, Stages() if progress else _quiet)
    write_text_atomic(path, text, "the report")
    return path


def image_figure(res: Results) -> go.Figure:
    """The report's first figure as a static image shows it: without the linear / log
    buttons, which an image cannot use, and without catalogue models (no predictions)."""
    return R.pareto_figure(I.pareto_info(res), controls=False)


IMAGE_FORMATS = ("png", "svg", "pdf")
IMAGE_ATTEMPTS = 3  # renders tried when kaleido's page was not ready (see write_image)


def write_image(
    results_dir: str | Path,
    path: str | Path,
    *,
    width: int = 1000,
    height: int = 620,
    scale: float = 2.0,
) -> Path:
    """Static image of the main (Pareto) figure for papers, via kaleido and a Chrome/Chromium.

    Raises ImageExportError saying why when the format is unknown or kaleido or a browser is
    missing; the HTML report does not depend on this.
    """
    p = Path(path)
    fmt = p.suffix.lstrip(".").lower()
    if fmt not in IMAGE_FORMATS:
        raise ImageExportError(
            f"{p}: image format must be one of {', '.join(IMAGE_FORMATS)} (from the file "
            f"extension), got {fmt or 'no extension'!r}"
        )
    fig = image_figure(load_results(results_dir))
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise ImageExportError(
            f"{p}: cannot write a static image: the Python package kaleido is not installed "
            "(pip install 'kaleido>=1'); it also needs Chrome or Chromium "
            "(Debian: apt-get install chromium). The HTML report is unaffected."
        ) from None
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(IMAGE_ATTEMPTS):
            try:
                fig.write_image(p, format=fmt, width=width, height=height, scale=scale)
                break
            except Exception as exc:
                # kaleido 1.x can run its render script before its page has defined
                # `kaleido_scopes` (a ReferenceError from the browser; seen once in CI on a
                # loaded 2-core machine): a fresh browser renders it; anything else is real.
                if "kaleido_scopes is not defined" not in str(exc) or attempt + 1 == IMAGE_ATTEMPTS:
                    raise
    except Exception as exc:  # kaleido raises its own and choreographer's error types
        raise ImageExportError(
            f"{p}: cannot write a static image: kaleido could not render it "
            f"({type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else 'no detail'}). "
            "kaleido needs Chrome or Chromium: install one (Debian: apt-get install chromium) "
            "or point BROWSER_PATH at its executable. The HTML report is unaffected."
        ) from None
    if not p.is_file() or p.stat().st_size == 0:
        raise ImageExportError(f"{p}: kaleido finished but wrote no image")
    return p
