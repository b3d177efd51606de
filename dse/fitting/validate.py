"""`dse validate` behind the CLI: score the frozen artifacts against every measured row.

For each kind of table `dse.data.load` reads, the family registered for that kind predicts the
rows of every GPU that has an artifact; MAPE is computed per (source, gpu, engine, kind, dtype
[, op]). Rows nobody can predict (no artifact for the GPU, no model for the kind, a shape the
model refuses) are counted in `unpredicted_rows`, never dropped silently; rows predicted outside
every fitted range of their kind are counted in `out_of_range_rows` (extrapolations). Data files
that gave no rows (empty, or a table / layout no reader knows) are listed through `log`.

    report = validate("/path/to/data", gpus=["h100_sxm"])
    report["results"][0]  # {"source": ..., "rows": ..., "latency_mape_pct": ..., ...}

One file (~650 lines) on purpose: every kind of measured table is scored through one grouping,
one count of unpredicted and out-of-range rows and one log; the per-kind parts are short.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import ArtifactError, ConfigError, DataError
from dse.fitting.families import Family
from dse.metrics import mape_pct, reported, scored
from dse.models.artifact import Artifact
from dse.roofline import board_limited_w
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import first_lenders

GROUP_KEYS = ("source", "gpu", "engine", "kind", "dtype")
# Rows of a GPU without its own artifact are scored with the same die's (dse.spec.stand_ins
# "artifact"); the result entry then names the artifact GPU in `artifact_gpu`.
ARTIFACT_FALLBACK: dict[str, str] = first_lenders("artifact")
# Kinds whose rows a GPU's artifact has no model for are priced with the sibling chip's artifact
# (artifact GPU -> sibling GPU, dse.spec.stand_ins "collective_tables"), the result naming the model
# in `fallback`. GEMMs borrow inside `dse.predict.gemm_choice.Gemm.choose` ("gemm_tables").
SIBLING_KINDS: dict[str, dict[str, str]] = {"allreduce": first_lenders("collective_tables")}


# Manifest model kinds whose fitted ranges bound the rows of a data kind, and the row column
# each range key is compared with (same name unless mapped here).
RANGE_KINDS: dict[str, tuple[str, ...]] = {
    "gemm": ("gemm",),
    "context_attention": ("context_attention",),
    "generation_attention": ("generation_attention",),
    "moe": ("moe", "moe_physics", "moe_kernels"),
    "allreduce": ("allreduce", "collective"),
    "layer_op": ("layer_op",),
    "softmax": ("reduction_op",),
    "layernorm": ("reduction_op",),
    "gelu": ("reduction_op",),
    "e2e": ("level3_e2e",),
    "e2e_energy": ("level3_e2e",),
    "e2e_ttft": ("level3_e2e",),
    "serving_energy": ("level3_e2e",),
}
_E2E_COLUMNS = {
    "batch": "batch_size",
    "prompt": "input_tokens",
    "output": "output_tokens",
    "tp": "n_gpus",
}


def outside_fit(kind: str, rows: pd.DataFrame, artifact: Artifact) -> np.ndarray:
    """True where a row lies outside the fitted range of every model of its kind in `artifact`
    (the envelope: min of the minima, max of the maxima, per input the rows carry). Such rows
    are still predicted (extrapolations) and counted in `out_of_range_rows`."""
    out = np.zeros(len(rows), dtype=bool)
    entries = artifact.manifest.get("models", {})
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}
    for entry in entries.values():
        if entry.get("kind") not in RANGE_KINDS.get(kind, ()):
            continue
        for key, span in (entry.get("fitted_range") or {}).items():
            try:
                a, b = float(span[0]), float(span[1])
            except (TypeError, ValueError, IndexError, KeyError):
                continue  # not a numeric [min, max] (a category list): no bound to check
            lo[key] = min(lo.get(key, a), a)
            hi[key] = max(hi.get(key, b), b)
    for key in lo:
        col = _E2E_COLUMNS.get(key, key) if kind in ("e2e", "e2e_energy", "e2e_ttft") else key
        if kind == "e2e_ttft" and key == "output":
            col = "input_tokens"  # the TTFT of the run with output = input (see hymell_fit)
        if col in rows:
            v = pd.to_numeric(rows[col], errors="coerce").to_numpy(float)
            out |= (v < lo[key]) | (v > hi[key])
    return out


def _validators(fams: Iterable[Family]) -> dict[str, Family]:
    out: dict[str, Family] = {}
    for fam in fams:
        if fam.predict_rows is None:
            continue
        for kind in fam.validates:
            out.setdefault(kind, fam)
    return out


def _priced(fam: Family, art: Artifact, kind: str, part: pd.DataFrame) -> pd.DataFrame:
    """`fam.predict_rows` without numpy warnings: rows a model cannot price (zero-size GEMMs)
    come back NaN."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return fam.predict_rows(art, kind, part)


def predict_table(
    kind: str,
    rows: pd.DataFrame,
    artifacts: dict[str, Artifact | None],
    validators: dict[str, Family],
    log: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Predicted latency/energy for the rows of one kind (NaN where it cannot), plus `reason`.

    A family that raises on a GPU's rows is retried file by file; the rows of a file it still
    raises on stay unpredicted with the error as the reason.
    """
    out = pd.DataFrame(
        {
            "latency_pred_s": np.nan,
            "energy_pred_j": np.nan,
            "reason": "",
            "outside_fit": False,
            "fallback": "",
            # the row's band and the model it is of (`dse.fitting.bands.put_band`)
            "latency_lo_s": np.nan,
            "latency_hi_s": np.nan,
            "band_model": "",
            "band_held_out": np.nan,
        },
        index=rows.index,
    )
    fam = validators.get(kind)
    if fam is None:
        out["reason"] = f"no model family predicts kind {kind!r}"
        return out
    for gpu, sub in rows.groupby("gpu", sort=True):
        art = artifacts.get(str(gpu))
        if art is None:
            out.loc[sub.index, "reason"] = f"no artifact for GPU {gpu!r}"
            continue
        _predict_gpu_rows(fam, art, kind, str(gpu), sub, out, log)
        if kind == "gemm":
            _gemm_borrowed(sub, rows, art, out)
        sibling = artifacts.get(SIBLING_KINDS.get(kind, {}).get(art.gpu, ""))
        todo = sub.index[~np.isfinite(out.loc[sub.index, "latency_pred_s"].to_numpy(float))]
        if sibling is not None and len(todo):
            _price_with_sibling(kind, rows.loc[todo], sibling, fam, out)
    missing = ~np.isfinite(out["latency_pred_s"].to_numpy(float)) & (out["reason"] == "")
    if missing.any():
        out.loc[missing, "reason"] = _why_unpredicted(kind, rows[missing])
    return out


def _predict_gpu_rows(
    fam: Family,
    art: Artifact,
    kind: str,
    gpu: str,
    sub: pd.DataFrame,
    out: pd.DataFrame,
    log: Callable[[str], None] | None,
) -> None:
    """Price one GPU's rows of a kind with its artifact into `out` (in place): predictions and
    `outside_fit`. A family that raises is retried file by file, so only the rows of a file it
    still fails on are lost (with the error as their `reason`)."""
    try:
        parts = [(sub, _priced(fam, art, kind, sub))]
    except Exception:  # one family failing on new rows must not lose every table:
        parts = []  # retry file by file, so only the rows of the file it fails on are lost
        by_file = sub.groupby("file", sort=True) if "file" in sub else [("", sub)]
        for file, part in by_file:
            try:
                parts.append((part, _priced(fam, art, kind, part)))
            except Exception as exc:
                why = f"{fam.name} failed on these rows ({type(exc).__name__}: {exc})"
                out.loc[part.index, "reason"] = why[:300]
                if log:
                    log(f"{kind} {gpu} {file}: {why}")
    for part, got in parts:
        _copy_predicted(got, part.index, out)
        out.loc[part.index, "outside_fit"] = outside_fit(kind, part, art)
    if kind not in E2E_KINDS:
        _bound_kernel_energy(gpu, sub.index, out)


PREDICTED = ("latency_pred_s", "energy_pred_j", "latency_lo_s", "latency_hi_s", "band_held_out")


def _copy_predicted(got: pd.DataFrame, idx: pd.Index, out: pd.DataFrame) -> None:
    """A family's predictions (and bands, where it gives them) for rows `idx`, into `out`."""
    for col in PREDICTED:
        if col in got:
            out.loc[idx, col] = got[col].reindex(idx).to_numpy(float)
    if "band_model" in got:
        out.loc[idx, "band_model"] = got["band_model"].reindex(idx).fillna("").astype(str)


def _bound_kernel_energy(gpu: str, idx: pd.Index, out: pd.DataFrame) -> None:
    """A kernel's predicted energy with its mean power under the board limit, as the pricer
    limits it (`dse.roofline.board_limited_w`), in place; a GPU outside the registry keeps the
    model's."""
    try:
        spec = get_gpu(gpu)
    except ConfigError:
        return
    lat = out.loc[idx, "latency_pred_s"].to_numpy(float)
    energy = out.loc[idx, "energy_pred_j"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        bounded = board_limited_w(spec, energy / lat) * lat
    out.loc[idx, "energy_pred_j"] = np.where(np.isfinite(bounded), bounded, energy)


def _gemm_borrowed(sub: pd.DataFrame, rows: pd.DataFrame, art: Artifact, out: pd.DataFrame) -> None:
    """Name the model that prices each GEMM row when it is not the row's own table
    (`fallback`, in place); rows priced with the sibling chip's tables are bounded by that
    artifact's fitted ranges (`outside_fit`)."""
    labels = gemm_fallback(sub, art)
    out.loc[sub.index, "fallback"] = labels
    lent = sub.index[labels.str.contains("@", regex=False).to_numpy(bool)]
    if len(lent):  # borrowed tables: the sibling's fitted ranges bound their rows
        from dse.predict.artifacts import sibling_artifact

        lender = sibling_artifact(art)  # the one Gemm(art) borrows from
        if lender is not None:
            out.loc[lent, "outside_fit"] = outside_fit("gemm", rows.loc[lent], lender)


def gemm_fallback(rows: pd.DataFrame, art: Artifact) -> pd.Series:
    """Per GEMM row, the model that prices it when it is not the row's own (engine, dtype)
    table of `art` (another engine, another dtype, or the sibling chip's: `name@gpu`), else ""."""
    from dse.models.gemm import canonical_dtype
    from dse.predict.gemm_choice import Gemm, model_name

    out = pd.Series("", index=rows.index, dtype=object)
    if not {"engine", "dtype"} <= set(rows.columns):
        return out
    try:
        gemm = Gemm(art)
    except ArtifactError:
        return out
    for (engine, dtype), sub in rows.groupby(["engine", "dtype"], sort=False):
        try:
            label = gemm.choose(str(dtype), str(engine)).label
            own = model_name(str(engine), canonical_dtype(str(dtype)))
        except (ArtifactError, ConfigError):
            continue  # no model for these rows, or a dtype no GEMM model knows: nothing to name
        if label != own:
            out.loc[sub.index] = label
    return out


def _price_with_sibling(
    kind: str, rows: pd.DataFrame, sibling: Artifact, fam: Family, out: pd.DataFrame
) -> None:
    """Price rows no model of their GPU's artifact priced with the sibling chip's artifact
    (SIBLING_KINDS); `fallback` names the model used."""
    try:
        got = _priced(fam, sibling, kind, rows)
    except Exception:  # the sibling failing leaves the rows as they were (unpredicted)
        return
    lat = got["latency_pred_s"].reindex(rows.index).to_numpy(float)
    ok = np.isfinite(lat)
    if not ok.any():
        return
    idx = rows.index[ok]
    _copy_predicted(got, idx, out)
    out.loc[idx, "outside_fit"] = outside_fit(kind, rows.loc[idx], sibling)
    out.loc[idx, "fallback"] = _model_names(kind, rows.loc[idx]) + "@" + sibling.gpu


def _model_names(kind: str, rows: pd.DataFrame) -> pd.Series:
    """The model name each row of a SIBLING_KINDS kind is priced by (its table's own)."""
    if kind == "allreduce":
        from dse.fitting.allreduce import allreduce_model_name
        from dse.models.allreduce import implementation_key

        key = implementation_key(rows).astype(str)
        op = rows["op"].astype(str) if "op" in rows else pd.Series("all_reduce", rows.index)
        names = [allreduce_model_name(o, k) for o, k in zip(op, key, strict=True)]
        return pd.Series(names, index=rows.index)
    return pd.Series(kind, index=rows.index)


E2E_KINDS = ("e2e", "e2e_energy", "e2e_ttft", "serving_energy")


def _why_unpredicted(kind: str, rows: pd.DataFrame) -> pd.Series:
    """A reason per row a family returned NaN for: for end-to-end rows the model catalogue and
    the engines Level 3 models are checked; other kinds name the row's engine and dtype."""
    base = "model cannot predict this row"
    if kind in E2E_KINDS and "model" in rows:
        from dse.spec.catalogue import lookup_model
        from dse.spec.choices import ENGINES

        problem: dict[str, str] = {}  # model name -> why the catalogue cannot give it ("" = ok)
        for name in rows["model"].astype(str).unique():
            try:
                lookup_model(name)
                problem[name] = ""
            except Exception as exc:  # ConfigError: unknown or not representable
                problem[name] = f"catalogue (dse/spec/catalogue.py): {exc}"[:200]
        engine = rows["engine"].astype(str) if "engine" in rows else pd.Series("", rows.index)
        model_problem = rows["model"].astype(str).map(problem)
        if {"input_tokens", "output_tokens"} <= set(rows.columns):
            from dse.fitting.e2e_rows import beyond_context

            over = beyond_context(rows) & (model_problem == "").to_numpy(bool)
            model_problem = model_problem.where(
                ~over,
                "prompt + output exceed the model's context (dse.spec.catalogue.CONTEXT_TOKENS): the "
                "engine cannot have generated the requested tokens",
            )
        why = np.where(
            model_problem != "",
            model_problem,
            np.where(
                ~engine.isin(("vllm", *ENGINES)).to_numpy(bool),
                "engine " + engine + " not modelled by Level 3",
                base + " (configuration invalid or does not fit as catalogued)",
            ),
        )
        return pd.Series(why, index=rows.index)
    parts = [c for c in ("engine", "dtype") if c in rows]
    if not parts:
        return pd.Series(base, index=rows.index)
    label = rows[parts].astype(str).apply(lambda r: ", ".join(f"{c} {r[c]}" for c in parts), axis=1)
    why = base + " (" + label + ")"
    dims = [c for c in ("m", "n", "k") if c in rows]
    if kind == "gemm" and dims:
        empty = (rows[dims].fillna(1).to_numpy(float) <= 0).any(axis=1)
        why = why.where(~empty, "empty GEMM (m, n or k = 0): nothing to price")
    if kind == "allreduce" and "n_nodes" in rows:
        multi = rows["n_nodes"].fillna(1).to_numpy(float) > 1
        why = why.where(~multi, "multi-node collective (n_nodes > 1): only one node is modelled")
    return why


def summarise(kind: str, rows: pd.DataFrame, pred: pd.DataFrame) -> list[dict[str, Any]]:
    """One result entry per (source, gpu, engine, kind, dtype[, op]) group of one kind."""
    df = rows.copy()
    for key in GROUP_KEYS:
        if key not in df:
            df[key] = kind if key == "kind" else ""
        df[key] = df[key].fillna("").astype(str)
    keys = list(GROUP_KEYS) + (["op"] if "op" in df else [])
    if "op" in df:
        df["op"] = df["op"].fillna("").astype(str)
    nan = pd.Series(np.nan, index=df.index)
    lat_true = df.get("latency_s", nan)
    energy_true = df.get("energy_j", nan)
    results = []
    for key, sub in df.groupby(keys, sort=True):
        idx = sub.index
        lat_p = pred.loc[idx, "latency_pred_s"].to_numpy(float)
        en_p = pred.loc[idx, "energy_pred_j"].to_numpy(float)
        lat_t = lat_true.loc[idx].to_numpy(float)
        en_t = energy_true.loc[idx].to_numpy(float)
        lat_mape = reported(mape_pct(lat_p, lat_t, keep="positive"))
        en_mape = reported(mape_pct(en_p, en_t, keep="positive"))
        n_en = int(scored(en_p, en_t, keep="positive").sum())
        entry: dict[str, Any] = dict(zip(keys, key, strict=True))
        reasons = pred.loc[idx, "reason"]
        entry.update(
            {
                "rows": len(sub),
                "latency_mape_pct": lat_mape,
                "energy_mape_pct": en_mape,
                "predicted_rows": int(np.isfinite(lat_p).sum()),
                "unpredicted_rows": int((~np.isfinite(lat_p)).sum()),
                # predicted, but outside every fitted range of the kind: extrapolations
                "out_of_range_rows": int(
                    (np.isfinite(lat_p) & pred.loc[idx, "outside_fit"].to_numpy(bool)).sum()
                ),
                "energy_rows": n_en,
            }
        )
        bad = reasons[reasons != ""]
        if len(bad):
            entry["unpredicted_reason"] = str(bad.value_counts().index[0])
        entry.update(band_summary(pred.loc[idx], lat_true.loc[idx].to_numpy(float)))
        fb = pred.loc[idx, "fallback"] if "fallback" in pred else pd.Series(dtype=object)
        fb = fb[(fb != "") & np.isfinite(lat_p)]
        if len(fb):  # priced by another table than the group's own: which, and how many rows
            entry["fallback"] = str(fb.value_counts().index[0])
            entry["fallback_rows"] = len(fb)
        results.append(entry)
    return results


def band_summary(pred: pd.DataFrame, y: np.ndarray) -> dict[str, Any]:
    """The band entries of one result: `band_coverage`, the coverage the table's band(s)
    reached on held-out layouts when calibrated (nested, `dse.fitting.bands`; row-weighted
    over the models that priced the table; None: not measured, e.g. Level 3's), `band_model`
    (the model whose band it is, the most rows' one), and over the rows scored here with a
    band: `band_rows`, `band_scored_coverage` (the share of measured values inside their band;
    rows the fit saw score in-sample)."""
    if "latency_lo_s" not in pred:
        return {}
    lo, hi = pred["latency_lo_s"].to_numpy(float), pred["latency_hi_s"].to_numpy(float)
    has = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(pred["latency_pred_s"].to_numpy(float))
    if not has.any():
        return {"band_coverage": None, "band_rows": 0}
    held = pred["band_held_out"].to_numpy(float)[has]
    scored = has & np.isfinite(y) & (y > 0)
    with np.errstate(invalid="ignore"):
        inside = (y >= lo) & (y <= hi)
    priced_by = pred["band_model"][has]
    return {
        "band_coverage": round(float(np.mean(held)), 4) if np.isfinite(held).all() else None,
        "band_model": str(priced_by.value_counts().index[0]),
        "band_rows": int(has.sum()),
        "band_scored_coverage": round(float(inside[scored].mean()), 4) if scored.any() else None,
    }


# Files under a data root that are documentation or metadata, never measurements.
_NOT_DATA = re.compile(r"(^|/)(LICENSE|README)[^/]*$|/models\.json$")
_DATA_SUFFIXES = (".csv", ".parquet", ".json")
_DATA_NAMES = ("_perf.txt", "_power.txt")  # aiconfigurator's older text tables (not read)


def unread_files(root: Path, tables: dict[str, pd.DataFrame]) -> list[str]:
    """Data files (csv, parquet, json) under `root` that gave no row to any table: empty files,
    tables of a kind no reader knows, folders laid out unlike any source (relative paths)."""
    read: set[str] = set()
    for table in tables.values():
        if "file" in table:
            read.update(map(str, table["file"].unique()))
    out = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        data = path.suffix in _DATA_SUFFIXES or path.name.endswith(_DATA_NAMES)
        data = data and not _NOT_DATA.search(rel)
        if data and rel not in read and path.is_file():
            out.append(rel)
    return out


def _log_unread(root: Path, tables: dict[str, pd.DataFrame], log: Callable[[str], None]) -> None:
    files = unread_files(root, tables)
    if files:
        shown = "; ".join(files[:20]) + (
            f"; ... ({len(files) - 20} more)" if len(files) > 20 else ""
        )
        log(
            f"{len(files)} data file(s) gave no rows (empty, or a table/layout no reader knows): {shown}"
        )


def validate(
    data_root: str | Path,
    gpus: Iterable[str] | None = None,
    artifacts: dict[str, Artifact | None] | None = None,
    kinds: Iterable[str] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score artifacts on every row of `data_root` (optionally only some GPUs / kinds).

    `artifacts` maps GPU -> Artifact; GPUs missing from it have none (default: the shipped
    artifact of each GPU in the data, None where there is none). Returns {"artifacts": {gpu:
    id}, "results": [...], "implausible_rows": {kind: ...}}.
    """
    from dse.data import normalise_gpu
    from dse.fitting.families import families

    tables = _read_tables(data_root, kinds, log)
    # the same spelling rules as the readers: --gpu H100 selects h100_sxm rows
    wanted = None if gpus is None else {normalise_gpu(g) for g in gpus}
    validators = _validators(families())
    arts: dict[str, Artifact | None] = dict(artifacts or {})
    shipped = artifacts is None  # given a mapping, GPUs missing from it have no artifact
    results: list[dict[str, Any]] = []
    implausible: dict[str, dict[str, Any]] = {}  # kind -> rows below the physical floor
    used: dict[str, str] = {}  # artifact GPU -> id, for the artifacts that scored rows
    for kind in sorted(tables):
        rows = tables[kind]
        if rows.empty:
            continue
        if wanted is not None:
            rows = rows[rows["gpu"].isin(wanted)]
            if rows.empty:
                continue
        rows = _plausible_rows(kind, rows, implausible, log)
        _artifacts_for(kind, rows, arts, shipped, log)
        use = _with_stand_ins(arts)
        results += _score_kind(kind, rows, arts, use, validators, used, log)
    if log:
        _log_out_of_range(results, log)
    return {
        "artifacts": dict(sorted(used.items())),
        "results": results,
        "implausible_rows": implausible,
    }


def _read_tables(
    data_root: str | Path, kinds: Iterable[str] | None, log: Callable[[str], None] | None
) -> dict[str, pd.DataFrame]:
    """The measured tables of `root` by kind (`dse.data.load`); logs the data files no reader
    read (all kinds only) and a folder without measured rows."""
    from dse.data import load

    root = Path(data_root)
    if not root.is_dir():
        raise DataError(f"{data_root}: data folder not found")
    tables = load(root, kinds)
    if log and kinds is None:
        _log_unread(root, tables, log)
    if log and not any(len(t) for t in tables.values()):
        from dse.data import READERS

        log(
            f"{root}: no measured rows found; a data folder holds source folders "
            f"({', '.join(READERS)}) laid out as in ../shared/data/README.md"
        )
    return tables


def _artifacts_for(
    kind: str,
    rows: pd.DataFrame,
    arts: dict[str, Artifact | None],
    shipped: bool,
    log: Callable[[str], None] | None,
) -> None:
    """Add to `arts` (in place) the artifact of every GPU a kind's rows need: their own, the
    stand-ins' and the siblings' (the shipped ones when `shipped`, else None: not given)."""
    siblings = SIBLING_KINDS.get(kind, {}).values()
    for gpu in sorted({*rows["gpu"].unique(), *ARTIFACT_FALLBACK.values(), *siblings}):
        if gpu not in arts and not shipped:
            arts[gpu] = None
        elif gpu not in arts:
            try:
                arts[gpu] = Artifact.load(gpu)
            except ArtifactError as exc:
                arts[gpu] = None
                if log and gpu in set(rows["gpu"]):
                    log(f"{gpu}: {exc}")


def _with_stand_ins(arts: dict[str, Artifact | None]) -> dict[str, Artifact]:
    """The artifacts to score with: each GPU's own, else its stand-in's (ARTIFACT_FALLBACK)."""
    use = {g: a for g, a in arts.items() if a is not None}
    for gpu, sibling in ARTIFACT_FALLBACK.items():
        if gpu not in use and sibling in use:
            use[gpu] = use[sibling]
    return use


def _score_kind(
    kind: str,
    rows: pd.DataFrame,
    arts: dict[str, Artifact | None],
    use: dict[str, Artifact],
    validators: dict[str, Family],
    used: dict[str, str],
    log: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """The result entries of one kind (`summarise` of its predicted rows), each naming the
    artifact that scored it; `used` (in place) collects those artifacts' ids by GPU."""
    pred = predict_table(kind, rows, use, validators, log)
    entries = summarise(kind, rows, pred)
    for entry in entries:
        art_gpu = entry["gpu"]
        if arts.get(art_gpu) is None:
            sibling = ARTIFACT_FALLBACK.get(art_gpu)
            if sibling in use:
                entry["artifact_gpu"] = art_gpu = sibling
        if art_gpu in use:
            used[art_gpu] = use[art_gpu].artifact_id
    return entries


def _log_out_of_range(results: list[dict[str, Any]], log: Callable[[str], None]) -> None:
    """One log line: how many predicted rows of each kind were extrapolations."""
    oor: dict[str, int] = {}
    for r in results:
        if r.get("out_of_range_rows"):
            oor[r["kind"]] = oor.get(r["kind"], 0) + r["out_of_range_rows"]
    if oor:
        log(
            "predicted rows outside the fitted range (extrapolations, counted in "
            "out_of_range_rows): " + ", ".join(f"{k} {n}" for k, n in sorted(oor.items()))
        )


def _plausible_rows(
    kind: str,
    rows: pd.DataFrame,
    implausible: dict[str, dict[str, Any]],
    log: Callable[[str], None] | None,
) -> pd.DataFrame:
    """The rows of one kind not below their physical floor (`dse.fitting.plausible`); the others
    are reported in `implausible[kind]` (counted and named) and logged, never scored."""
    from dse.fitting import plausible

    kept, report = plausible.screen(kind, rows)
    if report["rows"]:
        implausible[kind] = report
        if log:
            plausible.log_report(kind, report, log)
    return kept


def format_table(report: dict[str, Any]) -> str:
    """A fixed-width text table of the results (column widths fit the content)."""

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}"

    cols = ["source", "gpu", "engine", "kind", "dtype", "op"]
    body = [
        [str(r.get(c, "")) for c in cols]
        + [
            str(r["rows"]),
            str(r["unpredicted_rows"]),
            f(r["latency_mape_pct"]),
            f(r["energy_mape_pct"]),
            pct(r.get("band_coverage")),
            pct(r.get("band_scored_coverage")),
        ]
        for r in report["results"]
    ]
    # band%: held-out coverage of the table's band (dse fit --bands-only); in band%: rows here
    head = [*cols, "rows", "unpred", "lat MAPE%", "energy MAPE%", "band%", "in band%"]
    widths = [
        max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(head)
    ]

    def line(cells: list[str]) -> str:
        left = [c.ljust(w) for c, w in zip(cells[:6], widths[:6], strict=True)]
        right = [c.rjust(w) for c, w in zip(cells[6:], widths[6:], strict=True)]
        return "  ".join(left + right)

    lines = [line(head), "-" * len(line(head))] + [line(row) for row in body]
    for kind, imp in sorted(report.get("implausible_rows", {}).items()):
        where = ", ".join(f"{k} {v}" for k, v in sorted(imp.get("by_gpu_engine", {}).items()))
        lines.append(
            f"not scored, faster than the physical floor: {kind} {imp['rows']} of "
            f"{imp['of_rows']} rows ({where}; named in the log and the JSON)"
        )
    arts = ", ".join(f"{g}={a}" for g, a in report["artifacts"].items()) or "none"
    lines.append(f"artifacts: {arts}")
    return "\n".join(lines)
