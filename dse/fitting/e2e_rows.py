"""End-to-end training rows: argonne / ml-energy runs as configurations and Level-3 inputs
(`e2e_configs`, `price_rows` through the predictor's own `base_costs`), the engines' protocol
quirks, and vidur's block rows for Level 2 (`level2_rows`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import ConfigError, DataError
from dse.models.artifact import Artifact
from dse.models.level3 import GlobalInputs
from dse.spec import columns as C
from dse.spec.choices import ENGINES
from dse.spec.hardware import get_gpu

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
            routing=source_routing(r.engine),
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
    # per GPU, and apart the rows of an engine priced by its own kernel tables (the pricer
    # takes one engine's tables per batch: `dse.predict.pricing.batch_engine`)
    from dse.predict.pricing import own_engine_groups

    keys = np.char.add(cols["gpu"].astype(str), np.char.add("|", own_engine_groups(cols["engine"])))
    for key in np.unique(keys):
        idx = np.nonzero(keys == key)[0]
        name = cols["gpu"][idx[0]]
        sub = {k: v[idx] for k, v in cols.items()}
        gpu = get_gpu(str(name))
        base = base_costs(sub, len(idx), gpu, artifact, fitted_on or gpu)
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


def source_routing(engine: str) -> str:
    """The MoE routing (`workload.routing`) argonne's runs of `engine` decode under: identical
    for TensorRT-LLM (`IDENTICAL_SEQUENCE_ENGINES`), uniform for vLLM (random prompts, sampled
    at temperature 1: independent tokens)."""
    return "identical" if str(engine) in IDENTICAL_SEQUENCE_ENGINES else "uniform"


def identical_batch(cols: Mapping[str, Any]) -> np.ndarray:
    """True for argonne rows whose batch is copies of one sequence (any model): their power
    lacks the independent-sequence term of `dse.fitting.level3`."""
    return np.isin(np.asarray(cols["engine"]).astype(str), IDENTICAL_SEQUENCE_ENGINES)


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


# ---------------------------------------------------------------------------- Level 2
# vidur operators summed into each Level-2 block (per layer call).
VIDUR_BLOCK_OPS: dict[str, tuple[str, ...]] = {
    "attention_proj": ("attn_pre_proj", "attn_rope", "attn_post_proj"),
    "ffn_dense": ("mlp_up_proj", "mlp_act", "mlp_down_proj"),
}


def _vidur_wide(d: pd.DataFrame) -> pd.DataFrame:
    """One row per vidur (gpu, model, num_tokens, tp): each operator's measured seconds as a
    column, and the model's shape."""
    keys = ["gpu", "model", "num_tokens", "tensor_parallel"]
    wide = d.pivot_table(index=keys, columns="op", values="latency_s", aggfunc="first")
    shape = d.groupby(keys)[
        ["d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "gated_mlp"]
    ].first()
    return wide.join(shape).reset_index()


def _vidur_layer_costs(w: pd.DataFrame, gname: str, artifact: Artifact | None, artifact_gpu: str):
    """(cost of one layer's prefill, operators by name) of vidur's (model, tokens, tp) rows of
    one GPU as the pricer prices them: one layer, a prefill of num_tokens single-token
    sequences = num_tokens rows through every operator; Level 2 applied where `artifact` has
    it (`dse.predict.pricing.Pricer.price`, what `dse predict` runs)."""
    from dse.predict.ops import forward_ops
    from dse.predict.pricing import Pricer

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
    fitted_on = get_gpu(artifact_gpu) if artifact is not None else gpu
    ops = forward_ops(cols, "prefill")
    cost = Pricer(gpu, artifact, fitted_on, cols).price(ops, "prefill")
    return cost, {op.name: op for op in ops}


def level2_rows(
    layer_ops: pd.DataFrame, gpus: tuple[str, ...], artifact: Artifact | None, artifact_gpu: str
) -> dict[str, pd.DataFrame]:
    """Per block: one row per vidur (model, tokens, tp) with the measured block time and the
    measured time of its two GEMMs, the Level-1 time of the same operators and the Level-2
    inputs (`dse.models.level2.block_features`)."""
    from dse.models.level2 import LEVEL2_BLOCKS, block_features

    d = layer_ops[layer_ops["gpu"].isin(gpus)]
    if d.empty:
        return {}
    wide = _vidur_wide(d)
    out: dict[str, pd.DataFrame] = {}
    for gname in wide["gpu"].unique():
        w = wide[wide["gpu"] == gname].reset_index(drop=True)
        gpu = get_gpu(str(gname))
        # Level 1 only: no Level-2 models in the artifact passed here
        cost, by_name = _vidur_layer_costs(w, str(gname), artifact, artifact_gpu)
        for block, names in LEVEL2_BLOCKS.items():
            measured = w[list(VIDUR_BLOCK_OPS[block])].sum(axis=1, min_count=3).to_numpy()
            l1 = sum(cost.items_s[k] for k in names)
            # one layer: each operator's Level-1 time is that of one call
            X = block_features({k: cost.items_s[k] for k in names}, by_name, block, gpu)
            rows = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
            rows["measured_s"] = measured
            first, _, last = VIDUR_BLOCK_OPS[block]
            rows["measured_gemm1_s"] = w[first].to_numpy()
            rows["measured_gemm2_s"] = w[last].to_numpy()
            rows["l1_s"] = l1
            rows["model"] = w["model"].to_numpy()
            rows["gpu"] = gname
            ok = np.isfinite(measured) & (measured > 0)
            out.setdefault(block, []).append(rows[ok])  # type: ignore[arg-type]
    return {b: pd.concat(v, ignore_index=True) for b, v in out.items()}  # type: ignore[arg-type]


def projection_times_s(rows: pd.DataFrame, artifact: Artifact) -> np.ndarray:
    """Seconds of each of vidur's projection GEMM rows (ops of VIDUR_BLOCK_OPS's GEMMs) as `dse
    predict` prices them: the row's (model, tokens, tp) as a one-layer prefill through the
    pricer, Level 1 times the artifact's Level-2 eager calibration, the operator's item
    (`dse validate` scores this; issue 33: it scored Level 1 alone, 16.8-21.3% on H100 where
    the pricer's path is the Level-2 number). NaN where a row is not a projection."""
    from dse.models.level2 import LEVEL2_BLOCKS

    pricer_name = {
        vidur: pricer
        for block, vidur_ops in VIDUR_BLOCK_OPS.items()
        for vidur, pricer in zip(vidur_ops, LEVEL2_BLOCKS[block], strict=True)
    }
    out = np.full(len(rows), np.nan)
    pos = pd.Series(np.arange(len(rows)), index=rows.index)
    for gname, part in rows.groupby("gpu", sort=True):
        wide = _vidur_wide(part)
        cost, _ = _vidur_layer_costs(wide, str(gname), artifact, artifact.level1_gpu)
        keys = ["model", "num_tokens", "tensor_parallel"]
        at = part[keys].merge(wide[keys].assign(_w=np.arange(len(wide))), on=keys, how="left")
        w_idx = at["_w"].to_numpy()
        ops = part["op"].astype(str).to_numpy()
        for vidur, name in pricer_name.items():
            sel = ops == vidur
            if sel.any() and name in cost.items_s:
                item = np.asarray(cost.items_s[name], dtype=float)
                out[pos[part.index[sel]].to_numpy()] = item[w_idx[sel]]
    return out


SERVING_PROMPT_TOKENS = 256  # ml-energy-v2 did not record prompt lengths (ShareGPT: a few hundred)
