"""Fitting HYMELL Level 3 (and the Level-3 power calibration) into one GPU's artifact.

Level 3 of artifact X is fitted on the argonne end-to-end rows of `lenders("level3_rows", X)`
(X itself, or the chip it shares compute with when X has no end-to-end measurements), each row
priced by X's Level-1/2 models moved to the row's GPU by the roofline ratio
(`dse.predict.pricing.transfer_factor`). vLLM and TensorRT-LLM are separate engines.
Errors are held-out: leave-one-model-out inside `Level3.fit`.

    fitted = fit_levels("h100_sxm", "/path/to/data", artifact=level1_artifact)
    art = Artifact.from_fitted("h100_sxm", level1_fitted + fitted, data_root=...)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DataError
from dse.fitting.artifacts import LEVEL_PREFIXES, level1_base, merge, transient_artifact
from dse.fitting.cv import architecture_groups, cv_group
from dse.fitting.e2e_rows import (
    SERVING_PROMPT_TOKENS,
    Lookup,
    e2e_configs,
    identical_batch,
    price_rows,
    ttft_of_runs,
)
from dse.fitting.level2 import fit_level2
from dse.models.artifact import Artifact, FittedModel
from dse.models.level3 import Level3, fit_summary
from dse.models.level3_power import BAND_QUANTILES, Power3
from dse.spec import columns as C
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import lenders

# whole argonne models, at every TP, batch and length; the power calibration too where the power
# rows hold two or more models (cv.NOT_BY_ARCHITECTURE["level3.power"] otherwise)
LEVEL3_GROUP = cv_group("level3", ("model",))


def _level1_gpu(artifact: Artifact | None, gpu: str) -> str:
    """The GPU the Level-1 models pricing the rows were fitted on (`gpu` for the roofline)."""
    return artifact.level1_gpu if artifact is not None else gpu


def fit_level3(
    gpu: str,
    e2e: pd.DataFrame,
    artifact: Artifact | None,
    lookup: Lookup | None = None,
    seed: int = 0,
    ttft_rows: pd.DataFrame | None = None,
    **level3_kw: Any,
) -> tuple[Level3, dict[str, Any]]:
    """Fit Level 3 of artifact `gpu` on the argonne e2e rows of its "level3_rows" lenders, with the
    measured time to first token of those runs (`ttft_rows`, kind e2e_ttft) where there is one."""
    sources = lenders("level3_rows", gpu)
    rows = e2e[e2e["gpu"].isin(sources)]
    cfg, kept = e2e_configs(rows, lookup)
    if not len(cfg):
        raise DataError(f"no argonne end-to-end rows usable for {gpu} (looked for {sources})")
    g, _ = price_rows(cfg, artifact, _level1_gpu(artifact, gpu))
    ttft = ttft_of_runs(kept, ttft_rows)
    model = Level3(seed=seed, **level3_kw).fit(
        g, kept["latency_s"].to_numpy(float), architecture_groups(kept, LEVEL3_GROUP), ttft
    )
    info = {
        "rows_from_gpus": list(sources),
        "rows_used": len(kept),
        "rows_skipped": int(len(rows) - len(kept)),
        "ttft_rows_used": int(np.isfinite(ttft).sum()),
        "models": sorted(kept["model"].unique()),
        "engines": fit_summary(model),
    }
    return model, info


def level3_band_coverage(
    gpu: str,
    e2e: pd.DataFrame,
    artifact: Artifact | None,
    ttft_rows: pd.DataFrame | None = None,
    lookup: Lookup | None = None,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Per engine, how often Level 3's end-to-end band holds on a model it was not calibrated
    on (`dse.fitting.bands.coverage_summary`), nested as the kernel bands are: each model's
    rows predicted leave-one-model-out (as `Level3.fit` scores itself), their band the one a
    Level-3 fit on the other models alone calibrates (its own leave-one-model-out quantiles),
    widened by the rows' distance outside that fit's range. The band `dse predict` reports is
    the full fit's; the 89-90% of docs/accuracy.md counts it on its own residuals."""
    from dse.fitting.bands import CROSS_SCHEME, NESTED_SCHEME, coverage_summary, worst_groups
    from dse.models.band import degree_of, log_residuals

    cfg, kept = e2e_configs(e2e[e2e["gpu"].isin(lenders("level3_rows", gpu))], lookup)
    if not len(cfg):
        return {}
    g, _ = price_rows(cfg, artifact, _level1_gpu(artifact, gpu))
    y = kept["latency_s"].to_numpy(float)
    ttft = ttft_of_runs(kept, ttft_rows)
    groups = architecture_groups(kept, LEVEL3_GROUP)
    full = Level3(seed=seed).fit(g, y, groups, ttft)
    out: dict[str, dict[str, Any]] = {}
    for engine, cv in full.cv_.items():
        idx = np.nonzero(g.engine == engine)[0]
        n = len(idx)
        lo, hi, deg = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
        cross_lo, cross_hi = np.full(n, np.nan), np.full(n, np.nan)
        held = np.asarray(cv["held_out_pred_s"], dtype=float)
        res = log_residuals(y[idx], held)
        fold_bands = []
        for m in np.unique(groups[idx]):
            te = groups[idx] == m
            tr = idx[~te]
            ok = np.isfinite(res[~te])
            if ok.any():  # diagnostic: the other models' held-out residuals, no refit
                cross_lo[te], cross_hi[te] = np.quantile(res[~te][ok], BAND_QUANTILES)
            if len(np.unique(groups[tr])) < 2:
                continue  # one model left: no held-out residual to calibrate a band on
            inner = Level3(seed=seed).fit(g.take(tr), y[tr], groups[tr], ttft[tr])
            lo[te], hi[te] = inner.engines_[engine].band_log
            fold_bands.append([float(v) for v in inner.engines_[engine].band_log])
            deg[te] = degree_of(inner.range_misses(g.take(idx[te])), int(te.sum()))
        summary = coverage_summary(y[idx], held, lo, hi, deg)
        cross = coverage_summary(y[idx], held, cross_lo, cross_hi, deg)["coverage"]
        summary["cross_fold"] = {"scheme": CROSS_SCHEME, "coverage": cross}
        names = kept["model"].astype(str).to_numpy()[idx]
        summary["worst_groups"] = worst_groups(y[idx], held, lo, hi, deg, names)
        summary.update(
            scheme=f"{NESTED_SCHEME} (leave-one-model-out)",
            groups=len(np.unique(groups[idx])),
            fold_log_bands=fold_bands,
            shipped_log_band=[float(v) for v in full.engines_[engine].band_log],
        )
        out[str(engine)] = summary
    return out


def fit_levels(
    gpu: str,
    data_root: str | Path,
    artifact: Artifact | None = None,
    lookup: Lookup | None = None,
    seed: int = 0,
    tables: Mapping[str, pd.DataFrame] | None = None,
) -> list[FittedModel]:
    """Level 3 (latency) and the Level-3 power calibration for artifact `gpu`, as FittedModels
    named "level3.e2e" and "level3.power". `artifact` holds the Level-1/2 models (None: the
    roofline stands in for them). `tables` may pass already-loaded `dse.data.load` tables."""
    if tables is None:
        from dse.data import load

        tables = load(data_root, ["e2e", "e2e_energy", "e2e_ttft"])
    e2e = tables.get("e2e")
    if e2e is None or e2e.empty:
        raise DataError(f"{data_root}: no argonne end-to-end rows (argonne/Plots/All_results.csv)")
    ttft_rows = tables.get("e2e_ttft")
    model, info = fit_level3(gpu, e2e, artifact, lookup, seed, ttft_rows=ttft_rows)
    files = sorted({str(Path(data_root) / f) for f in e2e["file"].unique()})
    if info["ttft_rows_used"] and ttft_rows is not None:
        files = sorted({*files, *(str(Path(data_root) / f) for f in ttft_rows["file"].unique())})
    cv = {e: v["cv"] for e, v in info["engines"].items()}
    out = [FittedModel("level3.e2e", model, cv=cv, files=tuple(files), info=info)]
    energy = tables.get("e2e_energy")
    if energy is not None and not energy.empty:
        pw, pinfo = fit_power3(gpu, energy, artifact, model, lookup)
        if pw is not None:
            pfiles = sorted({str(Path(data_root) / f) for f in energy["file"].unique()})
            out.append(
                FittedModel("level3.power", pw, cv=pinfo.pop("cv"), files=tuple(pfiles), info=pinfo)
            )
    return out


# ---------------------------------------------------------------------------- dse fit / validate
FAMILY = "hymell-levels-2-3"  # the `dse fit` family of Levels 2 and 3


def _family_fit(ctx: Any) -> list[FittedModel]:
    """`dse fit` entry: Level 2 and Level 3 on top of the Level-1 models fitted earlier in the
    run (`ctx.fitted`), for `ctx.gpu`. Returns [] when there is nothing to fit them on."""
    gpu = str(ctx.gpu)
    fitted = getattr(ctx, "fitted", None) or {}
    fitted = list(fitted.values()) if isinstance(fitted, Mapping) else list(fitted)
    earlier = [fm for fm in fitted if not fm.name.startswith(LEVEL_PREFIXES)]
    root = getattr(ctx, "data_root", None) or getattr(ctx, "data", None) or ""
    level1, earlier = level1_base(gpu, earlier, getattr(ctx, "keep", None), root)
    out: list[FittedModel] = []
    layer_ops = ctx.table("layer_op")
    # Level 2 is a residual over fitted Level-1 models: none without them (as in `main`).
    if level1 is not None and layer_ops is not None and not layer_ops.empty:
        out += fit_level2(
            gpu,
            layer_ops,
            level1,
            seed=int(getattr(ctx, "seed", 0)),
            band_coverage=bool(getattr(ctx, "band_coverage", False)),
        )
    if earlier or level1 is None:
        base = transient_artifact(gpu, earlier + out) if (earlier or out) else None
    else:
        base = merge(level1, gpu, out, root) if out else level1
    tables = {k: ctx.table(k) for k in ("e2e", "e2e_energy", "e2e_ttft")}
    e2e = tables["e2e"]
    if e2e is None or e2e.empty or not e2e["gpu"].isin(lenders("level3_rows", gpu)).any():
        return out
    out += fit_levels(gpu, root, artifact=base, seed=int(getattr(ctx, "seed", 0)), tables=tables)
    return out


def _family_predict_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    """Predicted latency and energy of measured end-to-end rows with a frozen artifact (NaN where
    the model is not in the catalogue or the configuration is invalid)."""
    from dse.predict import predict

    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    if kind == "e2e_ttft":
        # Fig. 22 TTFT: the first token of the All_results run of the same configuration,
        # whose output length equals its input length (the file writes output length 1).
        r = rows.reset_index(drop=True).assign(output_tokens=lambda d: d["input_tokens"])
        cfg, kept = e2e_configs(r.assign(_row=np.arange(len(r))))
        if len(cfg):
            arts = {str(g): artifact for g in cfg["gpu"].unique()}
            p = predict(cfg, artifacts=arts)
            idx = rows.index[kept["_row"].to_numpy()]
            out.loc[idx, "latency_pred_s"] = p["ttft_s"]
            _put_level3_band(out, idx, p, "ttft", p["ttft_s"])
    elif kind in ("e2e", "e2e_energy"):
        r = rows.reset_index(drop=True)
        cfg, kept = e2e_configs(r.assign(_row=np.arange(len(r))))
        if len(cfg):
            arts = {str(g): artifact for g in cfg["gpu"].unique()}
            p = predict(cfg, artifacts=arts)
            idx = rows.index[kept["_row"].to_numpy()]
            lat = p["latency_s"]  # each row under its source's routing (e2e_configs)
            out.loc[idx, "latency_pred_s"] = lat
            _put_level3_band(out, idx, p, "latency", lat)
            out.loc[idx, "band_held_out"] = _level3_held_out(artifact, cfg["engine"])
            # argonne power rows: GPU 0 of the tensor-parallel group.
            out.loc[idx, "energy_pred_j"] = as_measured_energy(
                cfg, p["energy_j"] / cfg["tensor_parallel"].to_numpy(), p["latency_s"], artifact
            )
    elif kind == "serving_energy":
        r = rows.reset_index(drop=True)
        conv = pd.DataFrame(
            {
                "model": r["model"],
                "gpu": r["gpu"],
                "engine": "vllm",
                "batch_size": np.maximum(np.rint(r["avg_batch_size"]), 1).astype(int),
                "input_tokens": SERVING_PROMPT_TOKENS,
                "output_tokens": np.maximum(np.rint(r["avg_output_tokens"]), 2).astype(int),
                "n_gpus": r["tensor_parallel"].astype(int),
                "_row": np.arange(len(r)),
            }
        )
        cfg, kept = e2e_configs(conv)
        if len(cfg):
            # A served model that does not fit as catalogued (405B in bf16 on 8 GPUs: it was
            # served in fp8) cannot be predicted as configured: NaN, counted by validate.
            fits = C.derived(*C.as_columns(cfg))["fits_memory"]
            cfg, kept = cfg[fits].reset_index(drop=True), kept[fits].reset_index(drop=True)
        if len(cfg):
            arts = {str(g): artifact for g in cfg["gpu"].unique()}
            p = predict(cfg, artifacts=arts)
            idx = rows.index[kept["_row"].to_numpy()]
            out.loc[idx, "latency_pred_s"] = p["tpot_s"]  # the serving rows' latency is TPOT
            _put_level3_band(out, idx, p, "tpot", p["tpot_s"])
            per_req = (
                p["energy_per_output_token_j"] * r["avg_output_tokens"].to_numpy()[kept["_row"]]
            )
            out.loc[idx, "energy_pred_j"] = per_req
    return out


def _put_level3_band(
    out: pd.DataFrame, idx: pd.Index, p: Mapping[str, Any], key: str, latency_s: Any
) -> None:
    """The prediction's own band (`dse.predict`: Level 3's, `<key>_lo_s` / `<key>_hi_s`) as
    factors around `latency_s` (in place); its held-out coverage is not measured nested."""
    lat = np.asarray(latency_s, dtype=float)
    base = np.asarray(p[f"{key}_s"], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out.loc[idx, "latency_lo_s"] = lat * np.asarray(p[f"{key}_lo_s"], dtype=float) / base
        out.loc[idx, "latency_hi_s"] = lat * np.asarray(p[f"{key}_hi_s"], dtype=float) / base
    for col in ("band_model", "band_held_out"):
        if col not in out:
            out[col] = "" if col == "band_model" else np.nan
    out.loc[idx, "band_model"] = "level3.e2e"


def _level3_held_out(artifact: Artifact, engines: pd.Series) -> np.ndarray:
    """Per row, the held-out coverage of Level 3's latency band for the row's engine, as
    `level3_band_coverage` measured it (manifest `engines.<engine>.band_held_out`); NaN where
    not measured."""
    entry = artifact.manifest["models"].get("level3.e2e", {}).get("engines", {})
    cov = {e: (v.get("band_held_out") or {}).get("coverage") for e, v in entry.items()}
    got = [cov.get(str(e)) for e in engines]
    return np.array([np.nan if c is None else float(c) for c in got])


def as_measured_energy(
    cfg: pd.DataFrame, energy_j: np.ndarray, latency_s: np.ndarray, artifact: Artifact
) -> np.ndarray:
    """Energy of one GPU with argonne's identical-sequence rows (IDENTICAL_SEQUENCE_ENGINES)
    at the power of copies of one sequence, as measured (user predictions are independent)."""
    same = identical_batch(cfg)
    if not same.any() or not artifact.has("level3.power"):
        return energy_j
    pw = artifact.model("level3.power")
    out = np.array(energy_j, dtype=float)
    t = np.asarray(latency_s, dtype=float)
    batch = cfg["batch_size"].to_numpy(float)
    gpus = cfg["gpu"].astype(str).to_numpy()
    for name in np.unique(gpus[same]):
        at = same & (gpus == name)  # the span of the row's own GPU, as predict used
        p = pw.as_identical(out[at] / np.maximum(t[at], 1e-12), batch[at], get_gpu(name))
        out[at] = p * t[at]
    return out


def model_power_w(
    parts: Mapping[str, np.ndarray], extra: Mapping[str, np.ndarray], gpus: np.ndarray
) -> np.ndarray:
    """Average power per GPU the operator power model predicts for whole requests: kernels at
    their modelled power, stretched to their Level-3 time, host gaps at idle power.

    `parts`: `Level3.correct` output; `extra`: `price_rows` kernel energy and time; `gpus`:
    registry name per row."""
    t = parts["ttft_s"] + parts["decode_s"]
    over = parts["pre_overhead_s"] + parts["dec_overhead_s"]
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    # The same sum as dse.predict.predict_columns before calibration.
    dec_rest = (
        extra["decode_energy_j"] - extra["decode_attn_energy_j"] - extra["decode_comm_energy_j"]
    )
    e = (
        extra["prefill_energy_j"] * parts["pre_factor"]
        + dec_rest * parts["dec_factor"]
        + extra["decode_attn_energy_j"] * parts["dec_attn_factor"]
        + extra["decode_comm_energy_j"] * parts["dec_comm_factor"]
        + idle * over
    )
    return e / t


def dynamic_fraction(power_w: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    """(P - P_idle) / (P_board - P_idle) per row."""
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return (power_w - idle) / (board - idle)


def from_fraction(y: np.ndarray, gpus: np.ndarray) -> np.ndarray:
    idle = np.array([get_gpu(str(x)).idle_power_w for x in gpus])
    board = np.array([get_gpu(str(x)).board_power_w for x in gpus])
    return idle + np.clip(y, 0.0, 1.0) * (board - idle)


def power_groups(kept: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Held-out groups: models where two or more exist, else batch sizes (held-out shapes)."""
    if kept["model"].nunique() > 1:
        return architecture_groups(kept, LEVEL3_GROUP), "leave-one-model-out"
    return kept["batch_size"].to_numpy(), "leave-one-batch-size-out"  # cv.NOT_BY_ARCHITECTURE


def pair_keys(kept: pd.DataFrame) -> np.ndarray:
    """One key per measured configuration apart from the engine: the rows of the two
    protocols that pair up in `fit_protocol`."""
    cols = ["gpu", "model", "batch_size", "input_tokens", "output_tokens", "n_gpus"]
    return kept[cols].astype(str).agg("|".join, axis=1).to_numpy()


def fit_power3(
    gpu: str,
    energy_rows: pd.DataFrame,
    artifact: Artifact | None,
    level3: Level3,
    lookup: Any = None,
) -> tuple[Power3 | None, dict[str, Any]]:
    """Fit the power calibration of artifact `gpu` on the argonne power rows of its
    "level3_power_rows" lenders (else those of its Level 3)."""
    sources = lenders("level3_power_rows", gpu) or lenders("level3_rows", gpu)
    rows = energy_rows[energy_rows["gpu"].isin(sources)]
    cfg, kept = e2e_configs(rows, lookup)
    if len(cfg) < 3:
        return None, {"cv": {}}
    g, extra = price_rows(cfg, artifact, _level1_gpu(artifact, gpu))
    gpus = cfg["gpu"].to_numpy()
    p_model = model_power_w(level3.correct(g), extra, gpus)
    measured = kept["power_w"].to_numpy(float)
    groups, scheme = power_groups(kept)
    pw = Power3().fit(
        dynamic_fraction(p_model, gpus),
        g.value("batch"),
        dynamic_fraction(measured, gpus),
        groups,
        identical=identical_batch(kept),
        pair_keys=pair_keys(kept),
    )
    held_p = from_fraction(pw.held_out_, gpus)
    ok = np.isfinite(pw.held_out_)
    logres = np.log(measured[ok] / held_p[ok])
    pw.band_log_ = np.quantile(logres, BAND_QUANTILES) if ok.any() else np.zeros(2)
    cv = {
        "scheme": scheme,
        "rows": int(ok.sum()),
        "power_mape_pct": float(np.mean(np.abs(held_p[ok] / measured[ok] - 1)) * 100)
        if ok.any()
        else None,
        "uncalibrated_power_mape_pct": float(np.mean(np.abs(p_model / measured - 1)) * 100),
    }
    info = {
        "cv": cv,
        "rows_from_gpus": list(sources),
        "rows_used": len(kept),
        "coefficients": [float(v) for v in pw.coef_],
        # Independent sequences' extra dynamic fraction at batch 64 (0 at batch 1).
        "protocol_c": float(pw.protocol_),
        # False: the fit was not physical (k1 <= 0); the operator power model is used as is.
        "calibrated": bool(pw.calibrated_),
    }
    return pw, info
