"""The objective function: batched latency and energy prediction for configuration columns.

`predict(configs)` is what `dse predict` and every sweep call. Per GPU it loads the frozen
HYMELL artifact (`surrogates/<gpu>/`), prices each operator of `dse.predict.ops.forward_ops` with the
Level-1 models and the Level-2 block residuals (`dse.predict.pricing`), integrates decode over
the growing KV cache with a quadrature, and corrects the whole request with Level 3
(`dse.models.level3`). Without an artifact a GPU falls back to the roofline
(`source == "roofline"`). Only numpy (and pandas for batches of 64+ rows) run here: no Optuna,
plotly or scikit-learn.

One file (~670 lines) on purpose: the objective function's steps (artifact resolution, base
costs, decode quadrature, Level 3, phase bounds, outputs) in the order they run; each heavy step
lives in its own module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np

from dse._heap import keep_freed
from dse._same import all_equal, where
from dse.errors import ArtifactError, ConfigError
from dse.models.artifact import Artifact
from dse.models.band import widen
from dse.models.base import RangeMiss, all_true, any_true
from dse.models.level3 import FACTOR_KEYS, GlobalInputs, group_kinds, kind_factors
from dse.predict._rows import ColumnsAt, ColumnsRead, Groups, KeyMemo, distinct_columns
from dse.predict.artifacts import resolve_artifact
from dse.predict.flags import _const_object, _miss_text, _oor_degree, _range_flags
from dse.predict.ops import LayerShapes, Op, forward_ops, op_counts
from dse.predict.power_bounds import bounded_energy_band, bounded_phases
from dse.predict.pricing import PhaseCost, Pricer, own_engine_groups
from dse.predict.serving import any_continuous, engine_traits
from dse.predict.serving import apply as apply_serving
from dse.predict.stacking import STACK_AT_MOST
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec import rules as R
from dse.spec.hardware import GPU, fp4_gpu_names, get_gpu

if TYPE_CHECKING:
    import pandas as pd

# Decode is integrated over the KV length with composite Simpson on this many segments (even:
# `node_strata` splits the nodes into 3 groups of equal weight).
DECODE_SEGMENTS = 2
LEVEL3_MODEL = "level3.e2e"
POWER3_MODEL = "level3.power"
# Band of a roofline-only prediction: no held-out residuals exist, so a wide factor (x0.5 .. x2).
ROOFLINE_BAND_LOG = np.log(2.0)

# Decode kernels Level 3 scales by a_attn and by a_comm (level3.KERNEL_GROUPS).
ATTENTION_KINDS = group_kinds("decode", "dec_attn_factor")
COMM_KINDS = group_kinds("decode", "dec_comm_factor")

OUTPUT_KEYS = (
    "ttft_s",
    "tpot_s",
    "latency_s",
    "prefill_energy_j",
    "decode_energy_j",
    "energy_j",
    "energy_per_output_token_j",
    "avg_power_w",
)
BAND_KEYS = (
    "ttft_lo_s",
    "ttft_hi_s",
    "tpot_lo_s",
    "tpot_hi_s",
    "latency_lo_s",
    "latency_hi_s",
    "energy_lo_j",
    "energy_hi_j",
)


# ---------------------------------------------------------------------------- quadrature
def decode_nodes(kv_start: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights, each (2m+1, n), so that sum_{j<steps} f(kv_start + j) ~= sum w f(x).

    The step sum equals the integral of f over [kv_start - 1/2, kv_start + steps - 1/2] exactly
    when f is linear (midpoint rule), and composite Simpson is exact on every segment where f is
    linear or quadratic, so the only error comes from the segments holding a kink where an
    operator changes regime (tested against the step-by-step sum in tests/predict/test_predictor.py).
    """
    a = np.asarray(kv_start, dtype=float) - 0.5
    width = np.asarray(steps, dtype=float)
    i, c = _SIMPSON
    h = width / (len(i) - 1)
    return a + i * h, c * h / 3.0


def _simpson_nodes(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(node index 0..m, composite Simpson coefficient 1, 4, 2, ..., 4, 1), each (m + 1, 1)."""
    i = np.arange(m + 1, dtype=float)[:, None]
    c = np.where((i == 0) | (i == m), 1.0, np.where(i % 2 == 1, 4.0, 2.0))
    i.flags.writeable = c.flags.writeable = False
    return i, c


_SIMPSON = _simpson_nodes(2 * DECODE_SEGMENTS)  # the same for every call: built once


def node_strata(k: int) -> np.ndarray:
    """Stratum (0, 1, 2) of each of the k = 4 j + 1 nodes of `decode_nodes`, shape (k, 1), so
    that every stratum carries a third of the Simpson weights (1, 4, 2, 4, ..., 4, 1): the even
    nodes (1 + 2 + ... + 2 + 1 = 4 j) form stratum 0, the odd ones (4 each) alternate 1 and 2.

    A decode-attention residual that is a mean of 3 MLPs then runs one member per node
    (`_hybrid.apply_residual`): the integral weighs each member by a third, as the mean does,
    at one member's cost (its difference from evaluating every member at every node is
    measured in docs/accuracy.md and bounded in tests/predict/test_predictor.py)."""
    if k % 4 != 1:
        raise ValueError(f"node_strata needs 4 j + 1 nodes, got {k}")
    return _strata(k)


@cache
def _strata(k: int) -> np.ndarray:
    """`node_strata`'s array, built once per node count (read-only: it is shared)."""
    i = np.arange(k)
    out = np.where(i % 2 == 0, 0, 1 + (i // 2) % 2).astype(np.int64)[:, None]
    out.flags.writeable = False
    return out


# ---------------------------------------------------------------------------- one GPU
# Bytes Level 3's KV-fill input counts as held back besides the weights: the memory rule of the
# artifacts' fit (before issue 18 refined `dse.spec.arch.memory_breakdown`), kept so that the shipped
# Level-3 models see the inputs they were fitted on.
LEVEL3_RESERVED_BYTES = 2 * 1024**3


def kv_memory(
    cols: Mapping[str, np.ndarray], gpu: GPU, mean_context: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(KV bytes the whole batch needs at full length, bytes left for the KV cache), per GPU, as
    Level 3 was fitted: tokens not rounded to blocks, 2 GiB held back (LEVEL3_RESERVED_BYTES),
    activations not counted. These are model inputs; whether a configuration runs is
    `dse.spec.arch.memory_breakdown`'s rule.

    `mean_context` rows (bool; None: none) need the KV of a continuous engine's running batch
    instead: its sequences are spread evenly over their output, so each holds prompt + half
    the output on average (vLLM 0.11.1, `dse.predict.serving.engine_traits`)."""
    tokens = None
    if mean_context is not None:
        half = cols["prompt_tokens"] + (cols["output_tokens"] + 1) // 2
        tokens = np.where(mean_context, half, cols["prompt_tokens"] + cols["output_tokens"])
    given = [cols[k] for k in KV_SIZE_COLUMNS if k in cols]
    if tokens is None and len(given) == len(KV_SIZE_COLUMNS):  # the caller's (a sweep's grid)
        weights, seq = given
    else:
        weights, seq = kv_sizes(cols, tokens).values()
    need = cols["batch_size"] * seq
    free = A.USABLE_FRACTION * gpu.hbm_capacity_bytes - weights - LEVEL3_RESERVED_BYTES
    return np.asarray(need, dtype=float), np.asarray(free, dtype=float)


# The sizes `kv_memory` reads (`kv_sizes`), which a caller that has them for every row may
# hand `predict` as columns outside the configuration (`Configs.with_columns`): the exact
# sweep's grid computes them once per architecture, TP and workload over the whole space
# (`dse.sweep._grid_derived`), not once per chunk (~12% of a chunk's prediction).
KV_SIZE_COLUMNS = ("kv_weight_bytes", "kv_sequence_bytes")


def kv_sizes(
    cols: Mapping[str, np.ndarray], tokens: Any = None, a: A.Architecture | None = None
) -> dict[str, np.ndarray]:
    """`KV_SIZE_COLUMNS` of each configuration: the weights one GPU stores (bytes) and one
    sequence's KV cache and state on it at `tokens` (None: its full length, prompt + output)
    as Level 3 was fitted (tokens not rounded to blocks). `a`: the columns' resolved
    architecture, when the caller has it."""
    if a is None:
        a = C.architecture(cols).resolved()  # once: the accounting below shares it
    tp = cols["tensor_parallel"]
    # each sequence at its full length: sliding layers hold at most their window, linear
    # layers a constant state (for plain GQA: tokens x KV bytes per token, as fitted)
    if tokens is None:
        tokens = cols["prompt_tokens"] + cols["output_tokens"]
    seq = A.kv_cache_bytes_per_gpu(a, tokens, tp)
    weights = A.params_per_gpu(a, tp) * A.dtype_bytes(a.weight_dtype)
    return dict(zip(KV_SIZE_COLUMNS, (weights, seq), strict=True))


def kv_waves(
    batch: np.ndarray, need: np.ndarray, free: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(KV fill, waves, sequences per wave). Fill = KV needed / KV memory left per GPU (> 1: the
    engine must queue or preempt); a batch that does not fit runs as consecutive waves of as
    many full-length sequences as fit (at least one)."""
    if batch.shape == need.shape == free.shape == (1,):
        return _kv_waves_one(float(batch[0]), float(need[0]), float(free[0]))
    b = batch.astype(float)
    fill = where(free > 0, need / np.maximum(free, 1.0), 10.0)
    fit = np.maximum(np.floor(np.maximum(free, 0.0) / np.maximum(need / b, 1.0)), 1.0)
    waves = np.ceil(b / np.minimum(fit, b))
    return fill, waves, np.ceil(b / waves)


def _kv_waves_one(b: float, need: float, free: float) -> tuple[np.ndarray, ...]:
    """`kv_waves` of one configuration in Python floats: the same operations in the same
    order (floor and ceil of finite doubles are exact either way), three arrays made instead
    of ~15 numpy calls."""
    fill = need / max(free, 1.0) if free > 0 else 10.0
    fit = max(float(math.floor(max(free, 0.0) / max(need / b, 1.0))), 1.0)
    waves = float(math.ceil(b / min(fit, b)))
    return np.array([fill]), np.array([waves]), np.array([float(math.ceil(b / waves))])


@dataclass
class BaseCost:
    """Levels 1-2 of one batch on one GPU: prefill, all decode steps, and what Level 3 needs."""

    prefill: PhaseCost
    decode: PhaseCost
    steps: np.ndarray  # decode steps per sequence (output_tokens - 1)
    kv_fill: np.ndarray  # KV needed / KV memory left per GPU
    waves: np.ndarray  # consecutive waves the batch runs in (1 when its KV cache fits)


def global_inputs(cols: Mapping[str, np.ndarray], base: BaseCost) -> GlobalInputs:
    """The per-configuration inputs of Level 3."""
    f = lambda k: cols[k].astype(float)  # noqa: E731
    return GlobalInputs(
        engine=cols["engine"].astype(str),
        t_pre_s=base.prefill.time_s,
        t_dec_s=base.decode.time_s,
        t_dec_attn_s=base.decode.part_s(*ATTENTION_KINDS),
        t_pre_roof_s=base.prefill.roof_time_s,
        t_dec_roof_s=base.decode.roof_time_s,
        t_dec_attn_roof_s=base.decode.roof_part_s(*ATTENTION_KINDS),
        t_dec_comm_roof_s=base.decode.roof_part_s(*COMM_KINDS),
        t_dec_comm_s=base.decode.part_s(*COMM_KINDS),
        steps=base.steps,
        batch=f("batch_size"),
        prompt=f("prompt_tokens"),
        output=f("output_tokens"),
        n_layers=f("n_layers"),
        d_model=f("d_model"),
        tp=f("tensor_parallel"),
        n_experts=f("n_experts"),
        # query heads per KV head; MLA: 1, every head gets its own K and V up from the latent
        # (the importer's n_kv_heads = n_heads: n_kv_heads plays no part, `dse.spec.inert`)
        gqa=where(cols["kv_lora_rank"] > 0, 1.0, f("n_heads") / np.maximum(f("n_kv_heads"), 1.0)),
        kv_fill=base.kv_fill,
        waves=base.waves,
    )


def base_costs(
    cols: Mapping[str, np.ndarray],
    n: int,
    gpu: GPU,
    artifact: Artifact | None,
    artifact_gpu: GPU | None = None,
    kv_mean_context: np.ndarray | None = None,
    flags: bool = True,
) -> BaseCost:
    """Levels 1-2: prefill and the sum of all decode steps on one GPU, and the step count.

    `artifact_gpu`: the chip the artifact's kernels were measured on, when not `gpu` itself;
    `kv_mean_context`: rows whose KV need is a running batch's (`kv_memory`); `flags` False:
    the costs need not carry the range flags and misses (`Pricer.flags`)."""
    fill, waves, per_wave = kv_waves(cols["batch_size"], *kv_memory(cols, gpu, kv_mean_context))
    queued = waves > 1
    if any_true(queued):
        cols = dict(cols)
        cols["batch_size"] = np.where(queued, per_wave, cols["batch_size"]).astype(np.int64)
    pricer = Pricer(gpu, artifact, artifact_gpu, cols)
    pricer.flags = flags
    out_tokens = cols["output_tokens"].astype(float)
    # The first output token comes out of prefill; the remaining output_tokens - 1 are decode
    # steps, step j attending to prompt_tokens + 1 + j cached tokens (j = 0 .. steps - 1).
    steps = np.maximum(out_tokens - 1.0, 0.0)
    nodes, weights = decode_nodes(cols["prompt_tokens"].astype(float) + 1.0, steps)
    grouped = n > STACK_AT_MOST and artifact is not None
    if grouped and not flags:
        # the metrics alone (a scan's chunk): the operators built on one row per shape group
        costs = _priced_on_groups(pricer, cols, n, nodes, weights)
        if costs is not None:
            pre, dec = costs
            if any_true(queued):  # the costs are the pricer's own arrays: scaled in place
                pre.scale_in_place(waves)
                dec.scale_in_place(waves)
            return BaseCost(pre, dec, steps, fill, waves)
    # a batch the pricer groups (`pricing.phase_groups`) notes, phase by phase, the columns its
    # operators are built from: they key the groups
    read = [ColumnsRead(cols) if grouped else cols for _ in range(3)]
    # the phase-independent sizes read from the columns once, for both phases
    shapes = LayerShapes.of(read[0], "prefill")
    pre_ops = forward_ops(read[1], "prefill", like=shapes)
    ops = forward_ops(read[2], "decode", kv_len=nodes, stratum=node_strata(len(nodes)), like=shapes)
    pre, dec = pricer.price_phases(
        [(pre_ops, "prefill", None), (ops, "decode", weights)],
        None if not grouped else [_group_key(read[0], read[1]), _group_key(read[0], read[2], True)],
    )
    if any_true(queued):  # the costs are the pricer's own arrays: scaled in place
        pre.scale_in_place(waves)
        dec.scale_in_place(waves)
    return BaseCost(pre, dec, steps, fill, waves)


# Columns that set only how many times an operator runs, never its sizes (`ops.forward_ops`:
# n_layers is the layer operators' count): left out of the shape groups' key.
COUNT_COLUMNS = ("n_layers",)


def _priced_on_groups(
    pricer: Pricer,
    cols: Mapping[str, np.ndarray],
    n: int,
    nodes: np.ndarray,
    weights: np.ndarray,
) -> list[PhaseCost] | None:
    """Both phases priced with their operators built on one row per shape group
    (`Pricer.price_on_groups`), or None where the batch has no such groups (most rows
    distinct) or an operator runs in some rows of a group only: the caller then builds them
    on every row (`pricing.phase_groups`).

    The groups are keyed on every column but `COUNT_COLUMNS` and the KV sizes (which only
    `kv_memory` reads), prefill's on all but output_tokens too (its operators do not read
    it): no coarser than `_group_key`'s columns, and the same groups where every other
    column is one the operators are built from (a sweep's searched fields). Building the
    operators of ~94,000 rows to price ~6,800 of them (an exact-sweep chunk) cost ~20 ms of
    its ~110, and keying the groups on their arrays ~5 ms more."""
    skip = {*COUNT_COLUMNS, *KV_SIZE_COLUMNS}
    names = [k for k in cols if k not in skip]
    memo = KeyMemo()  # the phases' columns are the same arrays
    try:
        pre_g = distinct_columns([cols[k] for k in names if k != "output_tokens"], n, memo=memo)
        dec_g = None if pre_g is None else distinct_columns([cols[k] for k in names], n, memo=memo)
    except TypeError:  # an unhashable object column (patterns as lists): built on every row
        return None
    if pre_g is None or dec_g is None or pre_g.rows is None or dec_g.rows is None:
        return None
    counts = op_counts(cols)
    # one gathered mapping where both phases have the same groups (their shapes shared)
    pre_at = ColumnsAt(cols, pre_g.rows)
    dec_at = pre_at if dec_g is pre_g else ColumnsAt(cols, dec_g.rows)
    shapes = LayerShapes.of(pre_at, "prefill")
    pre_ops = forward_ops(pre_at, "prefill", like=shapes, counts=counts)
    kv = nodes.take(dec_g.rows, axis=1)
    dec_ops = forward_ops(
        dec_at,
        "decode",
        kv_len=kv,
        stratum=node_strata(len(nodes)),
        like=shapes if dec_g is pre_g else None,
        counts=counts,
    )
    if not (_runs_whole(pre_ops, pre_g, n) and _runs_whole(dec_ops, dec_g, n)):
        return None
    return pricer.price_on_groups(
        [(pre_ops, "prefill", None, pre_g), (dec_ops, "decode", weights, dec_g)]
    )


def _runs_whole(ops: list[Op], g: Groups, n: int) -> bool:
    """Whether every operator runs in all or none of each group's rows (`pricing.phase_groups`
    keys the groups on where an operator runs; a count that is 0 at some depths only, e.g.
    a pattern's sliding layers in a shallow model, splits a group there)."""
    assert g.rows is not None and g.inverse is not None
    for op in ops:
        count = np.asarray(op.count)
        if count.shape != (n,):
            continue  # one value for every row
        runs = count > 0
        if all_true(runs) or not any_true(runs):
            continue
        if not np.array_equal(runs.take(g.rows).take(g.inverse), runs):
            return False
    return True


def _group_key(
    shared: Mapping[str, np.ndarray], phase: Mapping[str, np.ndarray], decode: bool = False
) -> list[np.ndarray] | None:
    """The configuration columns one phase's operator list was built from (`ColumnsRead.read`
    of the shared `LayerShapes` and of the phase's own `forward_ops`) less `COUNT_COLUMNS`,
    in decode plus those its KV-length nodes and weights come from (prompt and output
    tokens): the phase's shape-group key (`pricing.phase_groups`). None: not noted (columns
    iterated whole): the groups are keyed on the operators' arrays."""
    reads = [c.read if isinstance(c, ColumnsRead) else None for c in (shared, phase)]
    if reads[0] is None or reads[1] is None:
        return None
    names = reads[0] | reads[1] | ({"prompt_tokens", "output_tokens"} if decode else set())
    return [phase[k] for k in sorted(names - set(COUNT_COLUMNS)) if k in phase]


def predict_columns(
    cols: Mapping[str, np.ndarray],
    n: int,
    gpu: GPU | None = None,
    artifact: Artifact | str | None = "auto",
    *,
    texts: bool = True,
    models: bool = False,
    gqa_aware: np.ndarray | None = None,
    kv_mean_context: np.ndarray | None = None,
    metrics_only: bool = False,
) -> dict[str, np.ndarray]:
    """Predict configurations that all run on one GPU (complete columns, see dse.spec.columns).

    `artifact="auto"` loads the GPU's frozen artifact; None forces the roofline. `texts=False`
    leaves out `out_of_range_inputs`, `models=True` adds `kernel_models` (see `predict`).
    `gqa_aware` and `kv_mean_context` (bool per row) override which rows Level 3 prices with
    GQA-aware decode attention and which rows' KV need is a running batch's at its mean context
    (default: continuous rows of an engine version fitted so, `dse.predict.serving.
    engine_traits`); the serving fits set them on static rows. `metrics_only=True` returns
    the OUTPUT_KEYS columns alone, the same numbers (see `predict`).
    Configurations of an engine priced by its own kernel tables (SGLang,
    `adapters.OWN_TABLE_ENGINES`) are priced apart from the others, each as if alone.
    """
    engines = cols["engine"]
    groups = None if n < 2 or all_equal(engines) else own_engine_groups(engines)
    if gqa_aware is None and kv_mean_context is None:
        gqa_aware, kv_mean_context = engine_traits(cols)
    traits = (gqa_aware, kv_mean_context)
    if groups is not None and (groups != groups[0]).any():
        parts = []
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            part = {k: v[idx] for k, v in cols.items()}
            aware, mean = (None if v is None else np.asarray(v)[idx] for v in traits)
            one = predict_columns(
                part,
                len(idx),
                gpu,
                artifact,
                texts=texts,
                models=models,
                gqa_aware=aware,
                kv_mean_context=mean,
                metrics_only=metrics_only,
            )
            parts.append((idx, one))
        return _merged(parts, n)
    gpu = gpu or get_gpu(str(cols["gpu"][0]))
    # nvfp4 weights have no kernels on a GPU without FP4 tensor cores: nothing to price. The
    # registry (for the message's list of FP4 GPUs) is read only when such a row is there.
    if gpu.peak_fp4_flops_per_s is None and any_true(A.fp4_weights(cols["weight_dtype"])):
        why = R.check_weight_dtype_on_gpu(cols["weight_dtype"], gpu.name, False, fp4_gpu_names())
        if (why != "").any():
            raise ConfigError(next(m for m in why if m))
    artifact, fitted_for = resolve_artifact(gpu.name, artifact)
    # the serving step reads and writes the bands and flags: a continuous batch is predicted
    # whole, then cut to its metrics
    lean = metrics_only and not any_continuous(cols)
    base = base_costs(
        cols, n, gpu, artifact, _fitted_on(artifact, fitted_for, gpu), kv_mean_context, not lean
    )
    g = global_inputs(cols, base)
    lvl3 = _model(artifact, LEVEL3_MODEL)
    if lean:
        return _metrics(base, g, lvl3, _model(artifact, POWER3_MODEL), cols, gpu, n, gqa_aware)
    misses, flags = _range_flags(base.prefill, base.decode)
    corr = _level3_terms(lvl3, g, n, base.steps > 0, gqa_aware)
    misses.update(corr.misses)  # Level 3's parts come after the operators' in the text
    flags.update(corr.flags)
    cost = apply_level3(base, corr, gpu.idle_power_w)
    pw = _model(artifact, POWER3_MODEL)
    cost, power_band = _calibrated_energy(pw, g, cost, gpu, n)
    oor, degree = _oor_degree(misses, flags, n)
    out = _totals(cost, base.steps, cols, _bands(corr.band_lo, corr.band_hi, power_band, degree))
    host: dict[str, np.ndarray] = {}
    gpu_scale: np.ndarray | None = None
    if any_continuous(cols):
        # continuous batching: the static batch (x the engine version's GPU-time scale) plus
        # the engine's host time per decode step (dse.models.serving); the bands keep the
        # static prediction's relative width
        host, gpu_scale = apply_serving(out, cols, gpu, misses, flags)
        oor, degree = _oor_degree(misses, flags, n)
    # the energy band inside the power bounds over the latency band (after the host time,
    # which widens both)
    out["energy_lo_j"], out["energy_hi_j"] = bounded_energy_band(
        out["energy_j"],
        out["energy_lo_j"],
        out["energy_hi_j"],
        out["latency_lo_s"],
        out["latency_hi_s"],
        cols["tensor_parallel"].astype(float),
        gpu,
    )
    out["out_of_range"] = oor
    if texts:  # the text is ~17% of an all-distinct batch (docs/performance.md)
        out["out_of_range_inputs"] = _miss_text(misses, flags, n)
    out["out_of_range_degree"] = degree
    parts = _breakdown_columns(base, cost, corr.overheads if lvl3 is not None else None)
    if gpu_scale is not None:  # the parts of the scaled GPU time still sum to it
        parts = {k: v * gpu_scale for k, v in parts.items()}
    out.update(parts)
    out.update(host)
    out.update(_provenance(base, artifact, fitted_for, gpu, pw is not None, lvl3 is not None, n))
    if models:
        out["kernel_models"] = _kernel_models(base, n)
    return out if not metrics_only else {k: out[k] for k in OUTPUT_KEYS}


def _metrics(
    base: BaseCost,
    g: GlobalInputs,
    lvl3: Any,
    pw: Any,
    cols: Mapping[str, np.ndarray],
    gpu: GPU,
    n: int,
    gqa_aware: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """`predict_columns`' OUTPUT_KEYS of a static batch, by its steps, without what only the
    other columns read (range flags and misses, bands, breakdown, provenance): the same
    numbers, bit for bit."""
    corr = _level3_terms(lvl3, g, n, base.steps > 0, gqa_aware, flags=False)
    cost, _ = _calibrated_energy(
        pw, g, apply_level3(base, corr, gpu.idle_power_w, items=False), gpu, n
    )
    return _totals(cost, base.steps, cols, None)


def _merged(parts: list[tuple[np.ndarray, dict[str, np.ndarray]]], n: int) -> dict[str, np.ndarray]:
    """Predictions of disjoint configuration subsets (their indices, their outputs) as one of n
    rows; a column one subset lacks is 0 (text: "") there, text columns are object arrays."""
    out: dict[str, np.ndarray] = {}
    for _, pred in parts:
        for k, v in pred.items():
            if k not in out:
                text = v.dtype.kind in "OUS"
                out[k] = _const_object(n, "") if text else np.zeros(n, dtype=v.dtype)
    for idx, pred in parts:
        for k, v in pred.items():
            out[k][idx] = v
    return out


def _kernel_models(base: BaseCost, n: int) -> np.ndarray:
    """Per configuration, the fitted models that priced its operators (sorted, comma-joined;
    the roofline is named in `roofline_ops` instead): `dse predict`'s provenance of which
    engine's kernel tables priced it."""
    entries: list[tuple[str, np.ndarray]] = []
    for c in (base.prefill, base.decode):
        for k, s in c.sources.items():
            runs = c.items_s[k] > 0
            if not any_true(runs) or s == "none":
                continue
            rows = c.source_rows.get(k)
            for i, label in enumerate(s.split("+")):
                here = runs if rows is None else runs & (rows == i)
                if label != "roofline" and any_true(here):
                    entries.append((label, here))
    return _joined(entries, n)


@dataclass(frozen=True)
class Level3Correction:
    """What Level 3 says about one batch: the kernel factors (`FACTOR_KEYS`, all 1 without a
    Level 3), the host-side overheads per phase (decode's 0 where there is no decode step), the
    log latency band, and the inputs outside its fitted range (`misses`, `flags`)."""

    factors: Mapping[str, np.ndarray]
    pre_overhead_s: np.ndarray
    dec_overhead_s: np.ndarray
    band_lo: np.ndarray
    band_hi: np.ndarray
    misses: dict[str, RangeMiss]
    flags: dict[str, np.ndarray]

    @property
    def overheads(self) -> tuple[np.ndarray, np.ndarray]:
        return self.pre_overhead_s, self.dec_overhead_s


@dataclass(frozen=True)
class RequestCost:
    """One GPU's request after Level 3 (and, once `_calibrated_energy` ran, the power
    calibration): the scaled operator times per phase, and the phase totals."""

    pre_items_s: dict[str, np.ndarray]
    dec_items_s: dict[str, np.ndarray]
    t_pre: np.ndarray
    t_dec: np.ndarray
    e_pre: np.ndarray
    e_dec: np.ndarray
    has_decode: np.ndarray
    every_decode: bool  # has_decode.all(): decode_only skips the np.where on most batches

    def decode_only(self, v: np.ndarray) -> np.ndarray:
        """`v`, zero where there is no decode step."""
        return _decode_only(v, self.has_decode, self.every_decode)


def _level3_terms(
    lvl3: Any,
    g: GlobalInputs,
    n: int,
    has_decode: np.ndarray,
    gqa_aware: np.ndarray | None = None,
    flags: bool = True,
) -> Level3Correction:
    """Level 3's factors, overheads and band for the batch (`gqa_aware` rows without the
    argonne engines' GQA excess, `Level3.correct`); the roofline's (factors 1, no overhead,
    x0.5 .. x2) without a Level 3. `flags` False: no range misses nor flags (a caller that
    reads the times and energies only)."""
    misses: dict[str, RangeMiss] = {}
    flagged: dict[str, np.ndarray] = {}
    if lvl3 is not None:
        c = lvl3.correct(g, gqa_aware)
        if flags:
            misses = {f"level3: {k}": v for k, v in lvl3.range_misses(g).items()}
        if flags and not all_true(c["engine_known"]):
            flagged["level3: engine not fitted"] = ~c["engine_known"]
        pre_over, dec_over = c["pre_overhead_s"], c["dec_overhead_s"]
        band_lo, band_hi = c["band_lo"], c["band_hi"]
    else:
        c = dict.fromkeys(FACTOR_KEYS, np.ones(n))
        pre_over = dec_over = np.zeros(n)
        band_lo, band_hi = np.full(n, -ROOFLINE_BAND_LOG), np.full(n, ROOFLINE_BAND_LOG)
    dec_over = where(has_decode, dec_over, 0.0)
    return Level3Correction(c, pre_over, dec_over, band_lo, band_hi, misses, flagged)


def apply_level3(
    base: BaseCost, corr: Level3Correction, idle_w: float, items: bool = True
) -> RequestCost:
    """The request's time and energy on one GPU: every operator scaled by the Level-3 factor of
    its kind (level3.KERNEL_GROUPS: prefill one factor; decode one each for attention over the
    KV cache, all-reduces, and the rest), plus the host-side overheads. `items` False: the
    scaled operator times are not kept (the totals alone, `_metrics`)."""
    pre_items_s, t_pre, e_pre = _scaled(base.prefill, kind_factors("prefill", corr.factors), items)
    dec_items_s, t_dec, e_dec = _scaled(base.decode, kind_factors("decode", corr.factors), items)
    has_decode = base.steps > 0
    every_decode = all_true(has_decode)
    t_dec = _decode_only(t_dec, has_decode, every_decode)
    e_dec = _decode_only(e_dec, has_decode, every_decode)
    pre_over, dec_over = corr.pre_overhead_s, corr.dec_overhead_s
    # Energy of one GPU: kernels at their modelled power for their (corrected) time, and the
    # engine's host-side overhead at idle power (the GPU waits for the next launch).
    return RequestCost(
        pre_items_s,
        dec_items_s,
        t_pre + pre_over,
        t_dec + dec_over,
        e_pre + pre_over * idle_w,
        e_dec + dec_over * idle_w,
        has_decode,
        every_decode,
    )


def _decode_only(v: np.ndarray, has_decode: np.ndarray, every_decode: bool) -> np.ndarray:
    """`v`, zero where there is no decode step (`every_decode`: has_decode.all(), known)."""
    return v if every_decode else np.where(has_decode, v, 0.0)


def _calibrated_energy(
    pw: Any, g: GlobalInputs, cost: RequestCost, gpu: GPU, n: int
) -> tuple[RequestCost, np.ndarray]:
    """The energies scaled by the Level-3 power calibration (1 without one) and its log band
    (2, n): (below, above).

    The calibration gives the whole request one factor; each phase's power is then held
    between idle and the board limit, the request's energy kept (`dse.predict.power_bounds`):
    one factor for both phases put prefill far above the limit (issue 32)."""
    power_band = np.zeros((2, n))
    e_pre, e_dec = cost.e_pre, cost.e_dec
    if pw is not None:
        power_scale, power_band = pw.scale(g, cost.e_pre + cost.e_dec, cost.t_pre + cost.t_dec, gpu)
        e_pre, e_dec = e_pre * power_scale, e_dec * power_scale
    e_pre, e_dec = bounded_phases(e_pre, e_dec, cost.t_pre, cost.t_dec, gpu)
    return replace(cost, e_pre=e_pre, e_dec=e_dec), power_band


@dataclass(frozen=True)
class Bands:
    """Multiplicative bands around the prediction: latency (`lo`, `hi`) and energy."""

    lo: np.ndarray
    hi: np.ndarray
    e_lo: np.ndarray
    e_hi: np.ndarray


def _bands(
    band_lo: np.ndarray, band_hi: np.ndarray, power_band: np.ndarray, degree: np.ndarray
) -> Bands:
    """The bands from Level 3's log latency band and the power calibration's, widened with the
    distance outside the fitted ranges: fully (OOR_BAND_WIDEN) from a factor 2 outside a bound
    on, proportionally to the log distance below that."""
    w = widen(degree)  # the rule of every band (dse.models.band)
    lo, hi = np.exp(band_lo * w), np.exp(band_hi * w)
    # Energy band: latency and power residuals combined in quadrature (independent errors).
    e_lo = np.exp(-np.hypot(band_lo, power_band[0]) * w)
    e_hi = np.exp(np.hypot(band_hi, power_band[1]) * w)
    return Bands(lo, hi, e_lo, e_hi)


def _totals(
    cost: RequestCost, steps: np.ndarray, cols: Mapping[str, np.ndarray], bands: Bands | None
) -> dict[str, np.ndarray]:
    """The OUTPUT_KEYS and BAND_KEYS columns of the whole tensor-parallel group (`bands`
    None: OUTPUT_KEYS alone)."""
    t_pre, t_dec, e_pre, e_dec = cost.t_pre, cost.t_dec, cost.e_pre, cost.e_dec
    tp = cols["tensor_parallel"].astype(float)
    out_tokens = cols["output_tokens"].astype(float)
    latency = t_pre + t_dec
    energy_one_gpu = e_pre + e_dec
    # Every GPU of the tensor-parallel group runs its shard of every operator.
    energy = energy_one_gpu * tp
    tpot = where(cost.has_decode, t_dec / np.maximum(steps, 1.0), 0.0)
    out = {
        "ttft_s": t_pre,
        "tpot_s": tpot,
        "latency_s": latency,
        "prefill_energy_j": e_pre * tp,
        "decode_energy_j": e_dec * tp,
        "energy_j": energy,
        # Per output token of the whole batch: batch_size sequences each produce output_tokens.
        "energy_per_output_token_j": energy / (out_tokens * cols["batch_size"].astype(float)),
        "avg_power_w": energy_one_gpu / np.maximum(latency, 1e-12),
    }
    if bands is None:
        return out
    lo, hi = bands.lo, bands.hi
    return {
        **out,
        "ttft_lo_s": t_pre * lo,
        "ttft_hi_s": t_pre * hi,
        "tpot_lo_s": tpot * lo,
        "tpot_hi_s": tpot * hi,
        "latency_lo_s": latency * lo,
        "latency_hi_s": latency * hi,
        "energy_lo_j": energy * bands.e_lo,
        "energy_hi_j": energy * bands.e_hi,
    }


def _breakdown_columns(
    base: BaseCost, cost: RequestCost, overheads: tuple[np.ndarray, np.ndarray] | None
) -> dict[str, np.ndarray]:
    """`breakdown.<phase>.<op>_s` and `blocks.<phase>.<block>_s`: the scaled operator times and
    their sums per block, with Level 3's `system_overhead` (`overheads`, None without one)."""
    out: dict[str, np.ndarray] = {}
    for i, (phase, phase_cost, items) in enumerate(
        (("prefill", base.prefill, cost.pre_items_s), ("decode", base.decode, cost.dec_items_s))
    ):
        only = (lambda v: v) if phase == "prefill" else cost.decode_only
        for k, v in items.items():
            out[f"breakdown.{phase}.{k}_s"] = only(v)
        if overheads is not None:
            out[f"breakdown.{phase}.system_overhead_s"] = overheads[i]
        blocks: dict[str, np.ndarray] = {}
        for k, v in items.items():
            b = phase_cost.blocks.get(k, k)
            blocks[b] = blocks[b] + v if b in blocks else v
        if overheads is not None:
            blocks["system_overhead"] = overheads[i]
        for b, v in blocks.items():
            out[f"blocks.{phase}.{b}_s"] = only(v)
    return out


def _provenance(
    base: BaseCost,
    artifact: Artifact | None,
    fitted_for: str,
    gpu: GPU,
    calibrated: bool,
    has_level3: bool,
    n: int,
) -> dict[str, np.ndarray]:
    """Where the numbers came from, as string columns: source, artifact and energy source (one
    per batch: one GPU's artifact), and per configuration the operators the roofline priced and
    those priced with a sibling chip's table (`_row_sources`)."""
    # the lenders' text made once per distinct set of sibling GPUs, not once per row (~5 ms
    # of a sweep chunk's 94,000 rows)
    roofline, borrowed, lenders = _row_sources(
        base, n, lambda t: _lenders(artifact, t.split(",") if t else [])
    )
    meta = {
        "source": "hymell" if has_level3 else "roofline",
        "artifact_id": artifact.artifact_id if artifact is not None else "roofline-v0",
        "artifact_gpu": fitted_for if artifact is not None else "",
        "energy_source": _energy_source(artifact, gpu, calibrated),
    }
    out = {k: _const_object(n, v) for k, v in meta.items()}
    out["roofline_ops"] = roofline
    out["borrowed_ops"] = borrowed
    out["borrowed_artifacts"] = lenders
    return out


def _row_sources(
    base: BaseCost, n: int, lenders: Callable[[str], str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per configuration: the operators the roofline priced (no fitted model), those priced
    with a sibling chip's table ("<op>=<model>@<gpu>", e.g. H200 per-tensor fp8 GEMMs by
    H100's) and `lenders` of those sibling GPUs, each a sorted comma-joined text over the
    operators the configuration runs. A configuration's text does not depend on the batch it
    comes in."""
    # (label, text it adds to roofline_ops / borrowed_ops) per model name, and per entry the
    # rows where each label applies
    entries: list[tuple[str, str, np.ndarray]] = []  # (op, label, rows)
    for c in (base.prefill, base.decode):
        for k, s in c.sources.items():
            if "roofline" not in s and "@" not in s:  # a fitted model of this chip alone
                continue
            runs = c.items_s[k] > 0
            if not any_true(runs):
                continue
            rows = c.source_rows.get(k)
            if rows is None:
                entries.append((k, s, runs))
                continue
            for i, label in enumerate(s.split("+")):
                here = runs & (rows == i)
                if any_true(here):
                    entries.append((k, label, here))
    roof = [(k, m) for k, s, m in entries if "roofline" in s.split("+")]
    lent = [(f"{k}={s}", m) for k, s, m in entries if "@" in s]
    gpus = [(p.split("@", 1)[1], m) for _, s, m in entries for p in s.split("+") if "@" in p]
    return _joined(roof, n), _joined(lent, n), _joined(gpus, n, lenders)


def _joined(
    parts: list[tuple[str, np.ndarray]], n: int, then: Callable[[str], str] | None = None
) -> np.ndarray:
    """Per row, the sorted distinct texts of the parts whose mask holds there, comma-joined
    (and passed through `then`, when given); one join per distinct combination of masks."""
    post = then if then is not None else (lambda t: t)
    if not parts:
        return _const_object(n, post(""))
    if all(all_true(m) for _, m in parts):
        return _const_object(n, post(",".join(sorted({t for t, _ in parts}))))
    masks = np.stack([m for _, m in parts], axis=1)
    combos, inverse = np.unique(masks, axis=0, return_inverse=True)
    texts = np.empty(len(combos), dtype=object)
    for j, combo in enumerate(combos):
        texts[j] = post(",".join(sorted({parts[i][0] for i in np.flatnonzero(combo)})))
    return texts[np.ravel(inverse)]


def _scaled(
    cost: PhaseCost, factors: Mapping[str, np.ndarray], keep: bool = True
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Operator times scaled by the Level-3 factor of their kind ("*": every other kind):
    (items in seconds, total seconds, total joules). `keep` False: the items are not kept
    ({}), the totals the same (`_metrics`)."""
    items: dict[str, np.ndarray] = {}
    n = len(cost.time_s)
    if n <= STACK_AT_MOST and cost.items_s:
        # a few configurations: every operator at once, as (operators, n) matrices (the same
        # products; the totals summed over operators in their order, by one reduction)
        names = list(cost.items_s)
        f = np.array([factors.get(cost.kinds.get(k, ""), factors["*"]) for k in names])
        scaled = np.array([cost.items_s[k] for k in names]) * f
        e_items = np.array([cost.items_j[k] for k in names]) * f
        return dict(zip(names, scaled, strict=True)), scaled.sum(axis=0), e_items.sum(axis=0)
    t = np.zeros_like(cost.time_s)
    e = np.zeros_like(cost.time_s)
    if not keep:
        # each product made in one scratch array, then added: the same sums, without ~100
        # arrays of a sweep chunk's rows (0.75 MB each) allocated and written once each
        scratch = np.empty_like(t)
        for name, v in cost.items_s.items():
            f = factors.get(cost.kinds.get(name, ""), factors["*"])
            t += np.multiply(v, f, out=scratch)
            e += np.multiply(cost.items_j[name], f, out=scratch)
        return items, t, e
    for name, v in cost.items_s.items():
        f = factors.get(cost.kinds.get(name, ""), factors["*"])
        items[name] = v * f
        t += items[name]
        e += cost.items_j[name] * f
    return items, t, e


def _unique(a: np.ndarray) -> np.ndarray:
    """np.unique, with a fast path for the common all-equal column (sorting strings is slow)."""
    if len(a) == 1 or (len(a) and (a == a[0]).all()):
        return a[:1]
    return np.unique(a)


def _fitted_on(artifact: Artifact | None, name: str, default: GPU) -> GPU:
    """The spec of the GPU the artifact's Level-1 models were fitted on, as the artifact
    recorded it (`Artifact.gpu_spec`); `default` (the GPU predicted) for itself or none."""
    if artifact is None or not name or name == default.name:
        return default
    try:
        return artifact.gpu_spec(name)
    except ArtifactError:  # an artifact fitted for an unregistered GPU (tests): no transfer
        return default


def _model(artifact: Artifact | None, name: str) -> Any:
    if artifact is None or not artifact.has(name):
        return None
    return artifact.model(name)


def _lenders(artifact: Artifact | None, gpus: list[str]) -> str:
    """ "<gpu>:<artifact id>" of the sibling artifacts whose tables priced some operator."""
    if not gpus or artifact is None:
        return ""
    from dse.predict.artifacts import sibling_artifact  # only GEMM tables are borrowed

    sib = sibling_artifact(artifact)
    return ",".join(
        f"{g}:{sib.artifact_id if sib is not None and sib.gpu == g else 'unknown'}" for g in gpus
    )


def _energy_source(artifact: Artifact | None, gpu: GPU, calibrated: bool) -> str:
    if artifact is None or not artifact.names("power"):
        if calibrated:
            return "roofline power stand-in, level-3 calibrated on argonne GPU-0 power"
        return "roofline power stand-in (uncalibrated)"
    base = (
        f"power model fitted on measured kernel power of {gpu.name}"
        if gpu.measured_power
        else f"power model (no measured power for {gpu.name}; transferred from measured GPUs)"
    )
    return base + ("; level-3 calibrated on argonne GPU-0 power" if calibrated else "")


# ---------------------------------------------------------------------------- public API
def predict(
    configs: C.Configs | pd.DataFrame | Mapping[str, Any],
    artifacts: Mapping[str, Artifact | None] | None = None,
    *,
    texts: bool = True,
    models: bool = False,
    metrics_only: bool = False,
) -> dict[str, np.ndarray]:
    """Predict every configuration (rows may mix GPUs and engines).

    Returns arrays keyed as OUTPUT_KEYS, the band (BAND_KEYS), `out_of_range`, itemised
    `breakdown.<phase>.<op>_s` and `blocks.<phase>.<block>_s`, and provenance strings `source`
    ("hymell" or "roofline"), `artifact_id`, `artifact_gpu`, `roofline_ops` (operators priced by
    the roofline fallback), `borrowed_ops` / `borrowed_artifacts` (operators priced with a sibling
    chip's table, and that artifact's id) and `energy_source`. `artifacts` overrides the frozen artifact per GPU
    name (None forces the roofline).

    `texts=False` is for callers that keep only a few rows of a large batch (a sweep's scan for
    its front): the numbers are the same, `out_of_range` and `out_of_range_degree` included, but
    `out_of_range_inputs` (the text naming each input outside its fitted range, ~17% of the time
    of an all-distinct batch) is left out; predict the rows kept again with texts for it.

    A `dse.spec.columns.Configs` (`as_columns`, `SearchSpace.columns_from`) was checked when it
    was made and is taken as it is; any other batch (DataFrame, mapping) is checked here.

    A batch of more than 64 rows that repeats configurations (every column equal) predicts
    each once and gathers its outputs back to every row that repeats it (`_repeated_rows`; told
    on the caller's columns before checking where they are plain arrays, `_raw_repeats`, so
    that only the distinct rows are checked).

    `metrics_only=True` returns the OUTPUT_KEYS columns alone (the same numbers), for a scan
    that keeps only its objectives (`dse.sweep._enumerate`'s chunks): the range flags, bands,
    breakdown and provenance (~10% of a sweep chunk's prediction) are not made.

    `models=True` adds `kernel_models`: per configuration, the fitted models that priced its
    operators (e.g. `gemm.sglang.bfloat16` for an SGLang configuration on H100: an engine of
    `adapters.OWN_TABLE_ENGINES` is priced by its own kernel tables where the artifact has them).
    """
    raw = None if isinstance(configs, C.Configs) else _raw_repeats(configs)
    if raw is not None and raw.cols is not None and raw.inverse is not None:
        keep_freed()  # repeats told on the caller's columns: the distinct rows checked
        out = _predict_gpus(raw.cols, raw.cols.n, artifacts, texts, models, metrics_only)
        return _spread(out, raw.inverse)
    if isinstance(configs, C.Configs):  # checked when it was made: not again
        cols, n = configs, configs.n
    else:
        cols, n = C.as_columns(configs)
    if n > REPEATS_AFTER:
        # a bulk batch's ~30 MB of arrays a call reuse the heap, not fresh kernel pages
        # (`dse._heap`: the sys time of an all-distinct 20,000-row batch 28 -> 4 ms)
        keep_freed()
    # mostly distinct as given (`_raw_repeats`): not hashed again once checked
    repeats = None if raw is not None else _repeated_rows(cols, n)
    if repeats is None:
        return _predict_gpus(cols, n, artifacts, texts, models, metrics_only)
    # each distinct configuration predicted once (in the order it first comes), every output
    # gathered back to every row: a row's prediction does not depend on the batch it comes in
    rows, inverse = repeats.rows, repeats.inverse
    assert rows is not None and inverse is not None  # distinct_columns' groups always have both
    out = _predict_gpus(cols.take(rows), len(rows), artifacts, texts, models, metrics_only)
    return _spread(out, inverse)


# Batches of more rows than this have their repeated configurations predicted once
# (`_repeated_rows`); a one-row call or a few rows never hash.
REPEATS_AFTER = STACK_AT_MOST
# ... when fewer than this fraction of their rows are distinct: a repeated row costs 2-18 us of
# a bulk prediction (one core; a sweep-like batch's rows to distinct ones'), gathering every
# output back ~0.12 us a row (~80 keys), so even a tenth of the rows repeated pays; mostly
# distinct batches stop at the sample check (`_rows.distinct_columns`, ~4,000 rows).
REPEATS_BELOW = 0.9


def _repeated_rows(cols: C.Configs, n: int) -> Groups | None:
    """The groups of identical configurations of a batch (every column equal bit for bit, the
    text columns gpu and engine included; checked against each group's representative, so a
    hash collision never merges two configurations), or None: n <= REPEATS_AFTER, or at least
    REPEATS_BELOW of the rows distinct. The workload columns are keyed first: a batch of
    freely drawn workloads is told distinct by the sample check's first columns."""
    if n <= REPEATS_AFTER:
        return None
    names = [k for k in C.WORKLOAD_FIELDS if k in cols]
    names += [k for k in cols if k not in names]
    try:
        return distinct_columns([cols[k] for k in names], n, below=REPEATS_BELOW)
    except TypeError:  # an unhashable object column (an extra `with_columns` one): predict all
        return None


# The configuration columns `as_columns` reads (a set: `_raw_repeats` asks once per column).
_CONFIG_NAMES = frozenset(C.CONFIG_FIELDS)


@dataclass(frozen=True)
class _RawRepeats:
    """A batch's distinct configurations, checked (`cols`, in the order each first comes), and
    each row's among them (`inverse`)."""

    cols: C.Configs | None
    inverse: np.ndarray | None


# `_raw_repeats`' answer for a batch of which at least REPEATS_BELOW of the rows are distinct.
_MOSTLY_DISTINCT = _RawRepeats(None, None)


def _raw_repeats(configs: pd.DataFrame | Mapping[str, Any]) -> _RawRepeats | None:
    """`_repeated_rows` told on the caller's own columns, before they are checked: the rows
    whose configuration columns (`C.CONFIG_FIELDS`) are equal bit for bit are checked once
    (`C.as_columns` of a sweep-like 20,000-row batch's ~2,900 distinct rows, not of every row:
    it fills and checks ~50 columns a row), and the repeats are told on the ~12 given columns,
    not on the ~50 checked ones. Checking is row by row, and a column's set of values is the
    same in the distinct rows as in the batch, so each distinct row checks to what it checks to
    in the batch; rows that differ as given but check equal (0.0 and -0.0 of an integer field)
    are merged after checking, so the rows predicted are `_repeated_rows`'s, in its order.

    `_MOSTLY_DISTINCT`: at least REPEATS_BELOW of the rows are distinct as given; the checked
    batch is then predicted row by row without hashing it again (~2 M instructions a
    3,000-row call). `_repeated_rows` would find fewer distinct rows only where rows differ as
    given but check equal, and what that changes is the batch layout (~1e-7 relative).
    None (check every row, then `_repeated_rows`) unless every configuration column is a
    number, boolean or fixed-width string column of the batch's length, or one value; a batch
    that fails its check is checked whole, so its error is the one `as_columns` gives."""
    frame = C._is_frame(configs)
    names = list(configs.columns) if frame else list(configs)
    keyed: dict[str, np.ndarray] = {}
    one: dict[str, Any] = {}
    n = None
    for name in names:
        if name not in _CONFIG_NAMES:
            continue  # `as_columns` reads none of the others
        v = configs[name].to_numpy() if frame else configs[name]
        if isinstance(v, str | int | float | bool | np.generic):
            one[name] = v  # one value for every row, as `as_columns` reads it
            continue
        if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind not in "biufUS":
            return None  # lists (patterns), object columns, None: `as_columns` reads them
        if n is None:
            n = len(v)
            if n <= REPEATS_AFTER:  # a one-row or small call stops at its first column
                return None
        elif len(v) != n:
            return None
        keyed[name] = v
    if n is None:
        return None
    first = distinct_columns(list(keyed.values()), n, below=REPEATS_BELOW)
    if first is None:
        return _MOSTLY_DISTINCT
    rows, inverse = first.rows, first.inverse
    assert rows is not None and inverse is not None  # distinct_columns' groups always have both
    part = {k: v.take(rows) for k, v in keyed.items()}
    try:
        cols, m = C.as_columns({**part, **one}, own=True)
    except Exception:  # the whole batch is checked again below: its own error, as main gives
        return None
    # rows that check equal (0.0 and -0.0 of an integer field): merged as `_repeated_rows`
    # merges them (in the order each first comes)
    again = distinct_columns([cols[k] for k in cols], m, below=1.0)
    if again is not None:
        assert again.rows is not None and again.inverse is not None
        cols, inverse = cols.take(again.rows), again.inverse[inverse]
    return _RawRepeats(cols, inverse)


def _spread(out: dict[str, np.ndarray], inverse: np.ndarray) -> dict[str, np.ndarray]:
    """The outputs of a batch's distinct configurations gathered back to every row (`inverse`:
    each row's distinct configuration), key order kept. The float64 columns (~70 of ~80) are
    stacked and gathered by one `take` (not ~70 fancy indexes: 2.2 -> 1.95 ms of a sweep-like
    20,000-row batch's ~38, one core; most of the rest is writing the ~11 MB), each coming back
    as a contiguous row of one (k, n) array; a text column that holds one string (the
    provenance) is filled with it, the others are taken. The same values, bit for bit, as
    indexing each column."""
    floats = [k for k, v in out.items() if v.dtype == np.float64 and v.ndim == 1]
    got: dict[str, np.ndarray] = {}
    if len(floats) > 1:
        got = dict(
            zip(floats, np.stack([out[k] for k in floats]).take(inverse, axis=1), strict=True)
        )
    n = len(inverse)
    for k, v in out.items():
        if k in got:
            continue
        if v.dtype == object and v.ndim == 1 and len(v) and isinstance(v[0], str) and _same(v):
            got[k] = _const_object(n, v[0])  # the same object on every row, as `take` gives
        else:
            got[k] = v.take(inverse, axis=0)
    return {k: got[k] for k in out}


def _same(text: np.ndarray) -> bool:
    """Whether every string of an object array equals its first (~10 ns a row: equal strings
    are mostly the same object, which == finds first)."""
    return bool((text == text[0]).all())


def _predict_gpus(
    cols: C.Configs,
    n: int,
    artifacts: Mapping[str, Artifact | None] | None,
    texts: bool,
    models: bool,
    metrics_only: bool = False,
) -> dict[str, np.ndarray]:
    """`predict` of checked columns, GPU by GPU (`predict_columns`), merged."""
    parts = []
    gpus = cols["gpu"]
    for name in _unique(gpus):
        idx = np.nonzero(gpus == name)[0]
        part = cols if len(idx) == n else cols.take(idx)
        art: Artifact | str | None = "auto"
        if artifacts is not None and str(name) in artifacts:
            art = artifacts[str(name)]
        pred = predict_columns(
            part,
            len(idx),
            gpu=get_gpu(str(name)),
            artifact=art,
            texts=texts,
            models=models,
            metrics_only=metrics_only,
        )
        if len(idx) == n:
            return pred
        parts.append((idx, pred))
    return _merged(parts, n)
