"""Fitting HYMELL Level 3 (and the Level-3 power calibration) into one GPU's artifact.

Level 3 of artifact X is fitted on the argonne end-to-end rows of `lenders("level3_rows", X)`
(X itself, or the chip it shares compute with when X has no end-to-end measurements), each row
priced by X's Level-1/2 models moved to the row's GPU by the roofline ratio
(`dse.predict.pricing.transfer_factor`). vLLM and TensorRT-LLM are separate engines.
Errors are held-out: leave-one-model-out inside `Level3.fit_arrays`.

    fitted = fit_levels("h100_sxm", "/path/to/data", artifact=level1_artifact)
    art = Artifact.from_fitted("h100_sxm", level1_fitted + fitted, data_root=...)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from dse.errors import ConfigError, DataError
from dse.models.artifact import Artifact, FittedModel
from dse.models.level3 import GlobalInputs, Level3, fit_summary
from dse.spec import columns as C
from dse.spec.choices import ENGINES
from dse.spec.hardware import get_gpu
from dse.spec.stand_ins import lenders
from dse.surrogate.power3 import fit_power3

if TYPE_CHECKING:
    from dse.predict.request import BaseCost
    from dse.spec.hardware import GPU


Lookup = Callable[[str], Any]  # model name -> dse.spec.arch.Architecture


def _default_lookup() -> Lookup:
    try:
        from dse.spec.catalogue import lookup_model
    except ImportError as exc:  # the catalogue is part of the package; this is a broken install
        raise DataError(
            f"the model catalogue dse.spec.catalogue cannot be imported ({exc})"
        ) from None
    return lookup_model


def beyond_context(rows: pd.DataFrame) -> np.ndarray:
    """True for runs whose prompt + output exceed their model's context (dse.spec.catalogue
    CONTEXT_TOKENS): the engine cannot have generated the requested tokens, so the measured time
    is not that configuration's (argonne's 2048 + 2048 runs of 2048-context models end after
    prefill). Such rows are dropped, and dse validate says why."""
    from dse.spec.catalogue import context_tokens

    ctx = rows["model"].astype(str).map({m: context_tokens(m) for m in rows["model"].unique()})
    total = rows["input_tokens"].to_numpy(float) + rows["output_tokens"].to_numpy(float)
    limit = pd.to_numeric(ctx, errors="coerce").to_numpy(float)
    return np.isfinite(limit) & (total > limit)


def e2e_configs(
    rows: pd.DataFrame, lookup: Lookup | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Configuration columns for argonne-style rows (model, gpu, engine, batch_size,
    input_tokens, output_tokens, n_gpus) and the rows kept (same order). Rows whose model is not
    in the catalogue, whose engine is not modelled, or whose configuration is invalid / does not
    fit in memory are dropped (the caller counts them)."""
    lookup = lookup or _default_lookup()
    archs: dict[str, dict[str, Any] | None] = {}
    for name in rows["model"].unique():
        try:
            archs[name] = lookup(name).to_dict()
        except (ConfigError, KeyError):
            archs[name] = None
    keep = rows["engine"].isin(ENGINES) & rows["model"].map(lambda m: archs[m] is not None)
    keep &= ~beyond_context(rows)
    rows = rows[keep].reset_index(drop=True)
    recs = []
    for r in rows.itertuples(index=False):
        a = dict(archs[r.model])  # type: ignore[arg-type]
        a.update(
            gpu=r.gpu,
            engine=r.engine,
            batch_size=int(r.batch_size),
            prompt_tokens=int(r.input_tokens),
            output_tokens=int(r.output_tokens),
            tensor_parallel=int(r.n_gpus),
        )
        recs.append(a)
    cfg = pd.DataFrame(recs, columns=list(C.CONFIG_FIELDS) if not recs else None)
    if len(cfg):
        cols, n = C.as_columns(cfg)
        d = C.derived(cols, n)
        # A run that was measured can be predicted even when our memory rule is conservative:
        # keep rows that do not fit (KV overflow is a Level-3 feature); drop invalid shapes.
        ok = d["invalid"] == ""
        cfg, rows = cfg[ok].reset_index(drop=True), rows[ok].reset_index(drop=True)
    return cfg, rows


def price_rows(
    cfg: pd.DataFrame, artifact: Artifact | None, artifact_gpu: str
) -> tuple[GlobalInputs, dict[str, np.ndarray]]:
    """Level-1/2 costs of each row on its own GPU (artifact kernels moved there) as Level-3
    inputs, plus the kernels' prefill and decode energy per GPU (for the power calibration)."""
    from dse.predict.request import base_costs, global_inputs

    cols, _ = C.as_columns(cfg)
    parts: list[GlobalInputs] = []
    from dse.predict.request import ATTENTION_KINDS, COMM_KINDS

    keys = ("prefill_energy_j", "decode_energy_j", "decode_attn_energy_j", "decode_comm_energy_j")
    extra: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    order = []
    fitted_on = get_gpu(artifact_gpu) if artifact is not None else None
    for name in np.unique(cols["gpu"]):
        idx = np.nonzero(cols["gpu"] == name)[0]
        sub = {k: v[idx] for k, v in cols.items()}
        gpu = get_gpu(str(name))
        base = base_costs(sub, len(idx), gpu, artifact, fitted_on or gpu)
        same = identical_sequences(sub)
        if same.any():
            _route_as_one_sequence(base, sub, same, gpu, artifact, fitted_on or gpu)
        parts.append(global_inputs(sub, base))
        extra["prefill_energy_j"].append(base.prefill.energy_j)
        extra["decode_energy_j"].append(base.decode.energy_j)
        extra["decode_attn_energy_j"].append(base.decode.part_j(*ATTENTION_KINDS))
        extra["decode_comm_energy_j"].append(base.decode.part_j(*COMM_KINDS))
        order.append(idx)
    perm = np.argsort(np.concatenate(order))
    g = GlobalInputs(
        **{
            k: np.concatenate([np.asarray(getattr(p, k)) for p in parts])[perm]
            for k in GlobalInputs.__dataclass_fields__
        }
    )
    return g, {k: np.concatenate(v)[perm] for k, v in extra.items()}


# Engines whose argonne runs decode a batch of identical sequences. argonne's TensorRT-LLM
# scripts (run_precision_bench.py / run_power.py, `generate_input`) give every sequence of the
# batch the same prompt ("France" repeated input-length times) and decode greedily (top_k 1), so
# every sequence emits the same token at every step and a MoE layer routes all of them to the
# same top_k experts: a decode step reads top_k experts' weights, not the ~all that `batch`
# independent tokens touch. Its vLLM scripts draw random prompt tokens per sequence and sample
# at temperature 1 (independent routing). A fact of how the rows were measured, not of the engine.
IDENTICAL_SEQUENCE_ENGINES = ("trtllm",)


def identical_batch(cols: Mapping[str, Any]) -> np.ndarray:
    """True for argonne rows whose batch is copies of one sequence (any model): their power
    lacks the independent-sequence term of `dse.surrogate.power3`."""
    return np.isin(np.asarray(cols["engine"]).astype(str), IDENTICAL_SEQUENCE_ENGINES)


def identical_sequences(cols: Mapping[str, Any]) -> np.ndarray:
    """`identical_batch` rows of MoE models: the ones whose decode routing (every sequence to
    the same experts) changes their Level-1/2 cost (see `_route_as_one_sequence`)."""
    return identical_batch(cols) & (np.asarray(cols["n_experts"], dtype=float) > 1)


def _route_as_one_sequence(
    base: BaseCost,
    cols: Mapping[str, np.ndarray],
    same: np.ndarray,
    gpu: GPU,
    artifact: Artifact | None,
    artifact_gpu: GPU,
) -> None:
    """Reprice the decode MoE operators of rows `same` (in place) as one sequence's: every
    sequence routes to the same experts, so a step costs what a batch of one costs (the extra
    tokens' FLOPs are negligible at decode batch sizes), once per wave."""
    from dse.predict.request import base_costs

    idx = np.flatnonzero(same)
    one = {k: np.asarray(v)[idx] for k, v in cols.items()}
    one["batch_size"] = np.ones(len(idx), dtype=np.int64)
    b1 = base_costs(one, len(idx), gpu, artifact, artifact_gpu)
    dec, dec1 = base.decode, b1.decode
    waves = np.asarray(base.waves, dtype=float)[idx]
    for name, kind in dec.kinds.items():
        if kind != "moe":
            continue
        for items, items1 in ((dec.items_s, dec1.items_s), (dec.items_j, dec1.items_j)):
            if name in items and name in items1:
                new = items1[name] * waves
                delta = new - items[name][idx]
                items[name] = items[name].astype(float)  # a copy: base's arrays may be shared
                items[name][idx] = new
                total = dec.time_s if items is dec.items_s else dec.energy_j
                total[idx] += delta
        if name in dec.roof_s and name in dec1.roof_s:
            dec.roof_s[name] = dec.roof_s[name].astype(float)
            dec.roof_s[name][idx] = dec1.roof_s[name] * waves


# Columns that identify one argonne configuration across All_results and Fig. 22.
RUN_KEYS = ("gpu", "engine", "model", "batch_size", "input_tokens", "n_gpus")


def ttft_of_runs(kept: pd.DataFrame, ttft_rows: pd.DataFrame | None) -> np.ndarray:
    """Measured time to first token (argonne Fig. 22, kind e2e_ttft) of each end-to-end row,
    NaN where none was measured. A Fig. 22 row is the first token of the All_results run with
    the same configuration and output = input length (its end_latency is that run's Latency)."""
    out = np.full(len(kept), np.nan)
    if ttft_rows is None or ttft_rows.empty or kept.empty:
        return out
    t = ttft_rows.groupby(list(RUN_KEYS), as_index=False)["latency_s"].mean()
    t = t.rename(columns={"latency_s": "_ttft_s"})
    k = kept[list(RUN_KEYS)].reset_index(drop=True).assign(_row=np.arange(len(kept)))
    m = k.merge(t, on=list(RUN_KEYS), how="inner")
    same_run = (kept["input_tokens"].to_numpy() == kept["output_tokens"].to_numpy())[m["_row"]]
    out[m["_row"].to_numpy()[same_run]] = m["_ttft_s"].to_numpy()[same_run]
    return out


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
    g, _ = price_rows(cfg, artifact, gpu)
    ttft = ttft_of_runs(kept, ttft_rows)
    model = Level3(seed=seed, **level3_kw).fit_arrays(
        g, kept["latency_s"].to_numpy(float), kept["model"].to_numpy(), ttft
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


# ---------------------------------------------------------------------------- Level 2
# vidur operators summed into each Level-2 block (per layer call).
VIDUR_BLOCK_OPS: dict[str, tuple[str, ...]] = {
    "attention_proj": ("attn_pre_proj", "attn_rope", "attn_post_proj"),
    "ffn_dense": ("mlp_up_proj", "mlp_act", "mlp_down_proj"),
}


def level2_rows(
    layer_ops: pd.DataFrame, gpus: tuple[str, ...], artifact: Artifact | None, artifact_gpu: str
) -> dict[str, pd.DataFrame]:
    """Per block: one row per vidur (model, tokens, tp) with the measured block time, the
    Level-1 time of the same operators and the Level-2 features."""
    from dse.models.level2 import LEVEL2_BLOCKS, block_features
    from dse.predict.ops import forward_ops
    from dse.predict.pricing import Pricer

    d = layer_ops[layer_ops["gpu"].isin(gpus)]
    if d.empty:
        return {}
    keys = ["gpu", "model", "num_tokens", "tensor_parallel"]
    wide = d.pivot_table(index=keys, columns="op", values="latency_s", aggfunc="first")
    shape = d.groupby(keys)[
        ["d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "gated_mlp"]
    ].first()
    wide = wide.join(shape).reset_index()
    out: dict[str, pd.DataFrame] = {}
    fitted_on = get_gpu(artifact_gpu) if artifact is not None else None
    for gname in wide["gpu"].unique():
        w = wide[wide["gpu"] == gname].reset_index(drop=True)
        n = len(w)
        cfg = {
            "d_model": w["d_model"].to_numpy(np.int64),
            "n_layers": np.ones(n, dtype=np.int64),
            "n_heads": w["n_heads"].to_numpy(np.int64),
            "n_kv_heads": w["n_kv_heads"].to_numpy(np.int64),
            "d_ff": w["d_ff"].to_numpy(np.int64),
            "vocab_size": w["vocab_size"].to_numpy(np.int64),
            "gated_mlp": w["gated_mlp"].to_numpy(bool),
            "batch_size": w["num_tokens"].to_numpy(np.int64),
            "prompt_tokens": np.ones(n, dtype=np.int64),
            "output_tokens": np.ones(n, dtype=np.int64),
            "tensor_parallel": w["tensor_parallel"].to_numpy(np.int64),
            "gpu": np.full(n, gname),
        }
        cols, _ = C.as_columns(cfg)
        gpu = get_gpu(str(gname))
        # Level 1 only (no Level-2 models in the artifact passed here): one layer, prefill of
        # num_tokens single-token sequences = num_tokens rows through every operator.
        pricer = Pricer(gpu, artifact, fitted_on or gpu, cols)
        ops = forward_ops(cols, "prefill")
        cost = pricer.price(ops, "prefill")
        by_name = {op.name: op for op in ops}
        for block, names in LEVEL2_BLOCKS.items():
            measured = w[list(VIDUR_BLOCK_OPS[block])].sum(axis=1, min_count=3).to_numpy()
            l1 = sum(cost.items_s[k] for k in names)
            X = block_features(l1, by_name, block)
            rows = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
            rows["measured_s"] = measured
            rows["l1_s"] = l1
            rows["model"] = w["model"].to_numpy()
            rows["gpu"] = gname
            ok = np.isfinite(measured) & (measured > 0)
            out.setdefault(block, []).append(rows[ok])  # type: ignore[arg-type]
    return {b: pd.concat(v, ignore_index=True) for b, v in out.items()}  # type: ignore[arg-type]


def fit_level2(
    gpu: str,
    layer_ops: pd.DataFrame,
    artifact: Artifact | None,
    seed: int = 0,
    min_gain_pct: float = 0.5,
) -> list[FittedModel]:
    """Level-2 block residuals of artifact `gpu` on vidur's rows of its chip, kept only where
    they beat Level 1 alone on held-out models (leave-one-model-out) by `min_gain_pct`."""
    from threadpoolctl import threadpool_limits

    from dse.models.level2 import Level2Block

    sources = lenders("level2_rows", gpu)
    tables = level2_rows(layer_ops, sources, artifact, gpu)
    out = []
    with threadpool_limits(limits=1):
        for block, rows in tables.items():
            X = rows[[c for c in rows.columns if c.startswith("x")]].to_numpy(float)
            r = np.log(rows["measured_s"].to_numpy() / rows["l1_s"].to_numpy())
            groups = rows["model"].to_numpy()
            held = np.full(len(r), np.nan)
            for m in np.unique(groups):
                te = groups == m
                if te.all():
                    continue
                mdl = Level2Block(block, seed=seed).fit_arrays(X[~te], r[~te])
                held[te] = mdl.log_factor(X[te])
            ok = np.isfinite(held)
            y, l1 = rows["measured_s"].to_numpy(), rows["l1_s"].to_numpy()
            mape_l1 = float(np.mean(np.abs(l1[ok] / y[ok] - 1)) * 100) if ok.any() else None
            mape_l2 = (
                float(np.mean(np.abs(l1[ok] * np.exp(held[ok]) / y[ok] - 1)) * 100)
                if ok.any()
                else None
            )
            cv = {
                "scheme": "leave-one-model-out (vidur models)",
                "rows": int(ok.sum()),
                "models": len(np.unique(groups)),
                "level1_mape_pct": mape_l1,
                "level2_mape_pct": mape_l2,
            }
            if mape_l1 is None or mape_l2 is None or mape_l2 > mape_l1 - min_gain_pct:
                continue
            model = Level2Block(block, seed=seed).fit_arrays(X, r)
            out.append(
                FittedModel(f"level2.{block}", model, cv=cv, info={"rows_from_gpus": list(sources)})
            )
    return out


# ---------------------------------------------------------------------------- artifacts
def transient_artifact(gpu: str, fitted: list[FittedModel]) -> Artifact:
    """An in-memory artifact of models fitted earlier in a run (no file hashing, no id)."""
    models = {fm.name: {k: np.asarray(v) for k, v in fm.model.to_state().items()} for fm in fitted}
    entries = {
        fm.name: {
            "kind": type(fm.model).kind,
            "class": f"{type(fm.model).__module__}:{type(fm.model).__qualname__}",
            "fitted_range": {k: list(v) for k, v in fm.model.fitted_range().items()},
        }
        for fm in fitted
    }
    manifest = {"artifact_id": "unsaved", "gpu": gpu, "models": entries}
    return Artifact(manifest=manifest, models=models)


def merge(
    base: Artifact | None, gpu: str, fitted: list[FittedModel], data_root: str | Path
) -> Artifact:
    """`base` with the models in `fitted` added or replaced (same names), manifest merged."""
    new = Artifact.from_fitted(gpu, fitted, data_root=data_root)
    if base is None:
        return new
    models = {k: v for k, v in base.models.items() if k not in new.models}
    models.update(new.models)
    manifest = dict(base.manifest)
    entries = {k: v for k, v in base.manifest["models"].items() if k not in new.models}
    entries.update(new.manifest["models"])
    manifest["models"] = entries
    seen = {f["path"] for f in manifest.get("data_files", [])}
    manifest["data_files"] = list(manifest.get("data_files", [])) + [
        f for f in new.manifest["data_files"] if f["path"] not in seen
    ]
    manifest["libraries"] = new.manifest["libraries"]
    return Artifact(manifest=manifest, models=models)


# ---------------------------------------------------------------------------- dse fit / validate
FAMILY = "hymell-levels-2-3"  # the `dse fit` family of Levels 2 and 3
LEVEL_PREFIXES = ("level2.", "level3.")  # names of its models


def level1_base(
    gpu: str, earlier: list[FittedModel], keep: Artifact | None, root: str | Path
) -> tuple[Artifact | None, list[FittedModel]]:
    """The Level-1 models Levels 2-3 are fitted on, and the fitted models still to be merged.

    A whole `dse fit` run: the Level-1 models fitted earlier in it (`earlier`). A partial run
    (`dse fit --only ...` over an existing artifact, `keep`): the kept artifact's Level-1 models
    with this run's refitted families in their place. Levels 2-3 must see every Level-1 model
    the artifact will predict with (GEMM, power, ...), or Level 3 learns to correct operators
    priced by the roofline stand-in that the saved artifact then prices with its fitted models.
    `--only` this family alone with no artifact at the output: the shipped one's Level 1."""
    if keep is None and not earlier:
        from dse.resources import surrogates_dir

        folder = surrogates_dir() / gpu
        keep = Artifact.load(folder) if (folder / "manifest.json").is_file() else None
    kept = without_levels(keep, LEVEL_PREFIXES)
    if kept is None or not kept.models:
        return (transient_artifact(gpu, earlier) if earlier else None), earlier
    return (merge(kept, gpu, earlier, root) if earlier else kept), []


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
        out += fit_level2(gpu, layer_ops, level1, seed=int(getattr(ctx, "seed", 0)))
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
    elif kind in ("e2e", "e2e_energy"):
        r = rows.reset_index(drop=True)
        cfg, kept = e2e_configs(r.assign(_row=np.arange(len(r))))
        if len(cfg):
            arts = {str(g): artifact for g in cfg["gpu"].unique()}
            p = predict(cfg, artifacts=arts)
            idx = rows.index[kept["_row"].to_numpy()]
            out.loc[idx, "latency_pred_s"] = _as_measured_latency(cfg, p["latency_s"], artifact)
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
            per_req = (
                p["energy_per_output_token_j"] * r["avg_output_tokens"].to_numpy()[kept["_row"]]
            )
            out.loc[idx, "energy_pred_j"] = per_req
    return out


def _as_measured_latency(
    cfg: pd.DataFrame, latency_s: np.ndarray, artifact: Artifact
) -> np.ndarray:
    """`latency_s` with the rows argonne measured on identical sequences (MoE models under
    IDENTICAL_SEQUENCE_ENGINES) priced as they ran, as Level 3 was fitted on them."""
    cols, _ = C.as_columns(cfg)
    same = identical_sequences(cols)
    if not same.any() or not artifact.has("level3.e2e"):
        return latency_s
    out = np.array(latency_s, dtype=float)
    sub = cfg[same].reset_index(drop=True)
    g, _ = price_rows(sub, artifact, str(artifact.gpu))
    c = artifact.model("level3.e2e").correct(g)
    out[same] = c["ttft_s"] + c["decode_s"]
    return out


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


SERVING_PROMPT_TOKENS = 256  # ml-energy-v2 did not record prompt lengths (ShareGPT: a few hundred)


def without_levels(art: Artifact | None, prefixes: tuple[str, ...]) -> Artifact | None:
    """A view of `art` without the models whose names start with any of `prefixes`."""
    if art is None:
        return None
    keep = [n for n in art.models if not n.startswith(prefixes)]
    return Artifact(
        manifest={**art.manifest, "models": {n: art.manifest["models"][n] for n in keep}},
        models={n: art.models[n] for n in keep},
    )
