"""The HTML report of a sweep, and the reading of its results folder.

    from dse.report import write_report
    write_report("results/heads")            # -> results/heads/report.html

Figures are built in two steps: pure builders in `_info` (results -> NamedTuple, tested
directly) and thin plotly renderers in `_render`. `load_results` and the Pareto helpers live in
`_results` and import no plotting code, so `dse export` stays light; the plotly parts are
imported only when a report or an image is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dse.report._results import (
    FORMAT_VERSION,
    ObjectiveColumn,
    Results,
    ResultsError,
    fmt_quantity,
    load_results,
    unit_scale,
)

__all__ = [
    "FORMAT_VERSION",
    "ObjectiveColumn",
    "Results",
    "ResultsError",
    "fmt_quantity",
    "load_results",
    "render_html",
    "unit_scale",
    "write_image",
    "write_report",
]


def write_report(
    results_dir: str | Path, out: str | Path | None = None, progress: bool = False
) -> Path:
    """Write `report.html` for a results folder (default: inside it); returns the path.
    `progress`: a line on stderr as each stage starts (`report 2/6: Pareto figures (1.4 s)`)."""
    from dse.report._page import write_report as _write

    return _write(results_dir, out, progress)


def write_image(results_dir: str | Path, path: str | Path, **kw: Any) -> Path:
    """Static PNG / SVG / PDF of the main Pareto figure, without its interactive buttons
    (needs kaleido and a Chromium)."""
    from dse.report._page import write_image as _write

    return _write(results_dir, path, **kw)


def render_html(results: Results) -> str:
    """The report of loaded results as one self-contained HTML string."""
    from dse.report._page import render_html as _render

    return _render(results)
