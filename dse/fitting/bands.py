"""Kernel bands calibrated on held-out layouts, and their coverage measured honestly (issue 19).

A model's band (`dse.models.band.Band`) is the 5-95% quantiles of the log residuals of its fit's
own grouped cross-validation (every row predicted by a fit that saw no row of its layout):
split-conformal, the final model fitted on every row carrying the held-out residuals' band.

How often such a band holds on a layout nobody calibrated it on is measured by nesting the same
protocol in itself. For every outer fold (held-out layouts L):
  - the point prediction of L's rows is the fit's own CV prediction (a fit without L);
  - the band is calibrated exactly as the shipped one is, by the family's fold rule run on the
    other layouts alone (inner CV: no fit, residual or quantile ever sees a row of L);
  - a row of L is covered when log(measured / predicted) lies in that band, widened by the row's
    distance outside the outer fit's range (`dse.models.band.widen`), as a prediction is.
The coverage is the share of covered rows; a 90% band should cover 85-95%.

    table = BandTable("moe.vllm.fp8", y, groups, folds, fit_predict, scheme)
    oof = held_out(table)                       # the fit's CV (what it reports anyway)
    band = calibrate(table, oof, nested=True)   # Band, with `held_out` coverage measured
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dse.fitting.cv import FitPredict, FoldRule, held_out_predict
from dse.models.artifact import Artifact
from dse.models.band import Band, log_residuals, widen

NESTED_SCHEME = (
    "nested: each outer fold's rows predicted by the fit's CV, their band calibrated by the same "
    "fold rule on the other folds' groups alone"
)

# A diagnostic beside the nested number: no refit, and the band's fits as large as the scored
# fit (the nested inner fits have a fold fewer of layouts), but those fits saw the scored layout.
CROSS_SCHEME = (
    "cross-fold: each outer fold's band from the other outer folds' CV residuals (no residual "
    "of the scored layout; fits that saw it)"
)


@dataclass
class BandTable:
    """The held-out CV of one model's table: what the band is calibrated on.

    `y`: measured latency (s) per row; `groups`: held-out group label per row (a layout, a
    whole model; an octave or a row where the family has no layout input); `folds`: the
    family's fold rule; `fit_predict`: its CV fit (`dse.fitting.cv.FitPredict`); `strata`:
    columns the held-out coverage is reported by as well (name -> a label per row, e.g. the
    dtype of an attention table that mixes two)."""

    name: str
    y: np.ndarray
    groups: np.ndarray
    folds: FoldRule
    fit_predict: FitPredict
    scheme: str
    strata: Mapping[str, np.ndarray] = field(default_factory=dict)
    names: np.ndarray | None = None  # a readable label of each row's group ("4096x14336x2x8")


def held_out(table: BandTable, cache: dict | None = None) -> dict[str, np.ndarray]:
    """The table's out-of-fold predictions (`dse.fitting.cv.held_out_predict`)."""
    return held_out_predict(table.groups, table.folds, table.fit_predict, cache=cache)


def band_of(table: BandTable, oof: Mapping[str, np.ndarray]) -> Band | None:
    """The band of the held-out residuals (None: too few, e.g. a single layout)."""
    pred = oof.get("latency_s", np.full(len(table.y), np.nan))
    return Band.from_residuals(log_residuals(table.y, pred), scheme=table.scheme)


def calibrate(
    table: BandTable, oof: Mapping[str, np.ndarray] | None = None, nested: bool = False
) -> Band | None:
    """The model's band from its CV (`oof`, computed when not given); with `nested` its held-out
    coverage measured too (`nested_coverage`, about folds x as many fits again)."""
    cache: dict = {}
    if oof is None:
        oof = held_out(table, cache)
    band = band_of(table, oof)
    if band is None or not nested:
        return band
    return Band(
        band.log_lo,
        band.log_hi,
        rows=band.rows,
        scheme=band.scheme,
        held_out=nested_coverage(table, oof, cache),
    )


def nested_coverage(
    table: BandTable, oof: Mapping[str, np.ndarray] | None = None, cache: dict | None = None
) -> dict[str, Any]:
    """The coverage of the table's band on held-out layouts, by the nested protocol (module
    docstring); `oof`: the outer CV when already run (its fits are the outer ones)."""
    cache = {} if cache is None else cache
    if oof is None:
        oof = held_out(table, cache)
    n = len(table.y)
    pred = np.asarray(oof.get("latency_s", np.full(n, np.nan)), dtype=float)
    degree = np.nan_to_num(np.asarray(oof.get("degree", np.zeros(n)), dtype=float), nan=0.0)
    log_lo, log_hi = np.full(n, np.nan), np.full(n, np.nan)
    cross_lo, cross_hi = np.full(n, np.nan), np.full(n, np.nan)
    fold_bands = []
    for te in table.folds(table.groups):
        # diagnostic: the band of the other outer folds' CV residuals (fits of the same size
        # as the scored one's, some of which saw the scored layout; none of its residuals)
        c = Band.from_residuals(log_residuals(table.y[~te], pred[~te]))
        if c is not None:
            cross_lo[te], cross_hi[te] = c.log_lo, c.log_hi
        inner = held_out_predict(
            table.groups, table.folds, table.fit_predict, among=~te, cache=cache
        )
        inner_pred = inner.get("latency_s", np.full(n, np.nan))
        b = Band.from_residuals(log_residuals(table.y[~te], inner_pred[~te]))
        if b is not None:
            log_lo[te], log_hi[te] = b.log_lo, b.log_hi
            fold_bands.append([b.log_lo, b.log_hi])
    out = coverage_summary(table.y, pred, log_lo, log_hi, degree, table.strata)
    out["cross_fold"] = {
        "scheme": CROSS_SCHEME,
        "coverage": coverage_summary(table.y, pred, cross_lo, cross_hi, degree)["coverage"],
    }
    names = table.groups if table.names is None else table.names
    out["worst_groups"] = worst_groups(table.y, pred, log_lo, log_hi, degree, names)
    out.update(
        scheme=f"{NESTED_SCHEME} ({table.scheme})",
        groups=len(np.unique(table.groups)),
        folds=len(fold_bands),
        fold_log_bands=fold_bands,
        fits=len(cache),
    )
    return out


WORST_GROUPS = 5  # the held-out groups a coverage report names, least covered first


def worst_groups(
    y: np.ndarray,
    pred: np.ndarray,
    log_lo: np.ndarray,
    log_hi: np.ndarray,
    degree: np.ndarray,
    names: np.ndarray,
    n: int = WORST_GROUPS,
) -> list[dict[str, Any]]:
    """The `n` held-out groups least covered by their band (where the band fails, and by how
    much): name, rows, coverage, the median log residual and the band it was scored against."""
    names = np.asarray(names).astype(str)
    r = log_residuals(y, pred)
    w = widen(degree)
    scored = np.isfinite(r) & np.isfinite(log_lo) & np.isfinite(log_hi)
    with np.errstate(invalid="ignore"):
        hit = scored & (r >= log_lo * w) & (r <= log_hi * w)
    rows = []
    for g in np.unique(names[scored]):
        sel = scored & (names == g)
        rows.append(
            {
                "group": str(g),
                "rows": int(sel.sum()),
                "coverage": float(hit[sel].mean()),
                "median_log_residual": float(np.median(r[sel])),
                "log_band": [float(log_lo[sel][0]), float(log_hi[sel][0])],
            }
        )
    return sorted(rows, key=lambda e: (e["coverage"], -abs(e["median_log_residual"])))[:n]


def coverage_summary(
    y: np.ndarray,
    pred: np.ndarray,
    log_lo: np.ndarray,
    log_hi: np.ndarray,
    degree: np.ndarray | None = None,
    strata: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """How many rows lie inside their band: log(y / pred) in [log_lo w, log_hi w], w =
    widen(degree) per row (0: inside the fitted range). Rows without a prediction or a band are
    not counted. Returns the share covered (`coverage`, None for no rows), with and without the
    widening, inside and outside the range, the MAPE of the predictions scored, and the same
    per stratum (`by`: column -> label -> rows, coverage)."""
    y, pred = np.asarray(y, dtype=float), np.asarray(pred, dtype=float)
    d = np.zeros(len(y)) if degree is None else np.asarray(degree, dtype=float)
    r = log_residuals(y, pred)
    scored = np.isfinite(r) & np.isfinite(log_lo) & np.isfinite(log_hi)
    w = widen(d)
    with np.errstate(invalid="ignore"):
        hit = scored & (r >= log_lo * w) & (r <= log_hi * w)
        hit_plain = scored & (r >= log_lo) & (r <= log_hi)
    oor = scored & (d > 0)

    def share(mask: np.ndarray, of: np.ndarray) -> float | None:
        return None if not of.any() else float(mask[of].mean())

    out: dict[str, Any] = {
        "rows": int(scored.sum()),
        "coverage": share(hit, scored),
        "coverage_unwidened": share(hit_plain, scored),
        "rows_out_of_range": int(oor.sum()),
        "coverage_in_range": share(hit, scored & ~oor),
        "coverage_out_of_range": share(hit, oor),
        "below": share(scored & (r < log_lo * w), scored),  # measured under the band
        "above": share(scored & (r > log_hi * w), scored),
        "mape_pct": None
        if not scored.any()
        else float(100 * np.mean(np.abs(np.expm1(-r[scored])))),
    }
    by: dict[str, dict[str, Any]] = {}
    for col, labels in (strata or {}).items():
        lab = np.asarray(labels).astype(str)
        if len(np.unique(lab[scored])) < 2:
            continue  # one value: the whole table's numbers
        by[col] = {
            str(v): {
                "rows": int((scored & (lab == v)).sum()),
                "coverage": share(hit, scored & (lab == v)),
            }
            for v in np.unique(lab[scored])
        }
    if by:
        out["by"] = by
    return out


# ---------------------------------------------------------------------------- dse validate
BAND_COLUMNS = ("latency_lo_s", "latency_hi_s", "band_model", "band_held_out")


def put_band(
    out: pd.DataFrame,
    idx: pd.Index,
    artifact: Artifact,
    name: str,
    latency_s: Any,
    strata: Mapping[str, Any] | None = None,
    degree: Any = None,
    label: str | None = None,
    **inputs: Any,
) -> None:
    """Write into `out` (in place, rows `idx`) the band model `name` of `artifact` puts around
    its predicted `latency_s` (`Artifact.band_bounds`: widened by `degree`, else by the rows'
    `inputs` outside the fitted range), the model it is (`label`, default `name`) and its
    coverage on held-out layouts (of the stratum `strata`, e.g. {"dtype": "fp8"}; NaN: not
    measured). A model without a band leaves the rows without one."""
    for col in BAND_COLUMNS:
        if col not in out:
            out[col] = "" if col == "band_model" else np.nan
    bounds = artifact.band_bounds(name, latency_s, degree=degree, **inputs)
    if bounds is None:
        return
    band = artifact.band(name)
    cov = band.held_out_coverage(strata) if band is not None else None
    out.loc[idx, "latency_lo_s"] = bounds[0]
    out.loc[idx, "latency_hi_s"] = bounds[1]
    out.loc[idx, "band_model"] = label or name
    out.loc[idx, "band_held_out"] = np.nan if cov is None else cov
