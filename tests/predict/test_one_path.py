"""One path for every number (issue 33): on rows sampled from every measured kernel table the
pricer has an adapter for, the Level-1 latency and power `dse predict` prices (`dse.predict.
adapters.ADAPTERS`, then the board limit of `Pricer._from_price`) equal what `dse validate`
scores (each family's `predict_rows`, then `validate._bound_kernel_energy`) to 1e-6.

Rows are those the pricer would price with the same model: the engine it prices with (vLLM) and,
for MoE, the balanced routing without expert parallelism it assumes, bf16 (the pricer prices
every MoE dtype with the vLLM bf16 table, `adapters.PREFER`; noted in docs/accuracy.md).
Without the fix the H200 GEMM power of the two paths differed by up to 383%. vidur's projection
GEMM rows (`test_vidur_projections_one_path`) are scored on the pricer's Level 1 x Level 2 item.
Measured sliding-window rows (`test_sliding_window_one_path`) are priced as the operator list
builds a sliding layer of their shape: one call at the real length with the window (before,
the full kernel at the bounded length, count-scaled, without the window: latency off by up
to several x, H200 power by 14-55% MAPE, experiments/sliding_window_one_path.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting.families import families
from dse.fitting.validate import _bound_kernel_energy, _validators
from dse.models.artifact import Artifact
from dse.predict.adapters import ADAPTERS
from dse.predict.ops import Op, _gemm
from dse.roofline import board_limited_w
from dse.spec.arch import dtype_bytes
from dse.spec.hardware import get_gpu

GPUS = ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm")
PER_TABLE = 150  # rows sampled per (gpu, dtype) table: every regime shows up in a few hundred
TOL = 1e-6


def _sample(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    parts = [
        sub.sample(min(PER_TABLE, len(sub)), random_state=0)
        for _, sub in rows.groupby(keys, sort=True)
    ]
    return pd.concat(parts).reset_index(drop=True)


@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, pd.DataFrame]:
    from dse.data import load

    kinds = ["gemm", "context_attention", "generation_attention", "moe"]
    out = {}
    for kind, t in load(data_dir, kinds).items():
        t = t[t["gpu"].isin(GPUS) & (t["engine"] == "vllm") & (t["source"] == "aiconfigurator")]
        if "window_size" in t:  # full attention only (see test_attention_one_path)
            t = t[t["window_size"].fillna(0) == 0]
        out[kind] = _sample(t, ["gpu", "dtype"])
    return out


def _validate_path(kind: str, art: Artifact, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(latency s, power W) as `dse validate` scores the rows."""
    fam = _validators(families())[kind]
    with np.errstate(divide="ignore", invalid="ignore"):
        got = fam.predict_rows(art, kind, rows)
    _bound_kernel_energy(art.gpu, got.index, got)
    lat = got["latency_pred_s"].to_numpy(float)
    return lat, got["energy_pred_j"].to_numpy(float) / lat


def _predict_path(
    art: Artifact, op: Op, ctx: dict[str, str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(latency s, power W) as the pricer prices the operator (its board limit included)."""
    gpu = get_gpu(art.gpu)
    price = ADAPTERS[op.kind](art, op, gpu, ctx)
    assert price is not None, op.kind
    return price.latency_s, board_limited_w(gpu, price.power_w)


def _gemm_op(rows: pd.DataFrame, dtype: str) -> Op:
    m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
    w_bytes = dtype_bytes("fp8" if dtype.startswith("fp8") else "bfloat16")
    return _gemm("ffn/up", "ffn", np.ones(len(rows)), m, n, k, w_bytes, dtype)


def _attention_op(rows: pd.DataFrame, kind: str) -> Op:
    dims = {
        "batch_size": rows["batch_size"].to_numpy(float),
        "num_heads": rows["num_heads"].to_numpy(float),
        "num_kv_heads": rows["num_kv_heads"].to_numpy(float),
        "head_dim": rows["head_dim"].to_numpy(float),
        "kv_dtype": np.where(rows["kv_cache_dtype"].astype(str).str.contains("fp8"), "fp8", "bf16"),
    }
    if kind == "context_attention":
        dims["isl"] = rows["isl"].to_numpy(float)
        op_kind = "attention_prefill"
    else:
        dims["kv_len"] = rows["kv_len"].to_numpy(float)
        op_kind = "attention_decode"
    n = len(rows)
    # FLOPs and bytes only enter power where the model has no power head of its own
    return Op("attention/core", op_kind, "attention", np.ones(n), np.ones(n), np.ones(n), dims)


def _moe_op(rows: pd.DataFrame) -> Op:
    cols = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size")
    dims = {c: rows[c].to_numpy(float) for c in cols}
    n = len(rows)
    return Op("ffn/moe", "moe", "ffn", np.ones(n), np.ones(n), np.ones(n), dims)


def _check(
    kind: str, gpu: str, rows: pd.DataFrame, op: Op, ctx: dict[str, str] | None = None
) -> None:
    art = Artifact.load(gpu)
    t_val, p_val = _validate_path(kind, art, rows)
    t_pri, p_pri = _predict_path(art, op, ctx)
    ok = np.isfinite(t_val)
    assert ok.mean() > 0.9, f"{kind} {gpu}: validate priced {ok.sum()} of {len(ok)} rows"
    np.testing.assert_allclose(t_pri[ok], t_val[ok], rtol=TOL, err_msg=f"{kind} {gpu} latency")
    has_power = ok & np.isfinite(p_val)
    if np.isfinite(rows["power_w"]).any():  # a table with measured power: validate scores it
        assert has_power.mean() > 0.9, f"{kind} {gpu}: no power scored"
    np.testing.assert_allclose(
        p_pri[has_power], p_val[has_power], rtol=TOL, err_msg=f"{kind} {gpu} power"
    )


@pytest.mark.parametrize("gpu", GPUS)
def test_gemm_one_path(tables: dict[str, pd.DataFrame], gpu: str) -> None:
    rows = tables["gemm"]
    for dtype, sub in rows[rows["gpu"] == gpu].groupby("dtype", sort=True):
        sub = sub.reset_index(drop=True)
        _check("gemm", gpu, sub, _gemm_op(sub, str(dtype)))


@pytest.mark.parametrize("kind", ["context_attention", "generation_attention"])
@pytest.mark.parametrize("gpu", GPUS)
def test_attention_one_path(tables: dict[str, pd.DataFrame], kind: str, gpu: str) -> None:
    rows = tables[kind]
    # full attention, as the pricer's attention operator carries it (no window, beam or
    # earlier KV input; a sliding-window layer is its own operator, `ops._sliding_core`)
    full = np.ones(len(rows), dtype=bool)
    for col in ("window_size", "past_kv_len"):
        if col in rows:
            full &= rows[col].fillna(0).to_numpy(float) == 0
    if "beam_width" in rows:
        full &= rows["beam_width"].fillna(1).to_numpy(float) == 1
    sub = rows[(rows["gpu"] == gpu) & full].reset_index(drop=True)
    assert len(sub), f"no {kind} rows for {gpu}"
    _check(kind, gpu, sub, _attention_op(sub, kind))


def _sliding_op(rows: pd.DataFrame, kind: str) -> Op:
    """The sliding-window attention operator `dse.predict.ops.forward_ops` builds for one
    sliding layer of each row's shape (its heads on one GPU, its window; prefill over a prompt
    of `isl` tokens, decode over `kv_len` cached ones)."""
    from dse.predict.ops import forward_ops
    from dse.spec import columns as C

    n = len(rows)
    heads, hd = rows["num_heads"].to_numpy(np.int64), rows["head_dim"].to_numpy(np.int64)
    prefill = kind == "context_attention"
    length = rows["isl" if prefill else "kv_len"].to_numpy(np.int64)
    cols, _ = C.as_columns(
        {
            "d_model": heads * hd,
            "n_layers": np.ones(n, dtype=np.int64),
            "n_heads": heads,
            "n_kv_heads": rows["num_kv_heads"].to_numpy(np.int64),
            "head_dim": hd,
            "d_ff": 4 * heads * hd,
            "vocab_size": np.full(n, 32000),
            "attention_pattern": np.full(n, "sliding"),
            "sliding_window": rows["window_size"].to_numpy(np.int64),
            "kv_dtype": np.where(
                rows["kv_cache_dtype"].astype(str).str.contains("fp8"), "fp8", "bfloat16"
            ),
            "batch_size": rows["batch_size"].to_numpy(np.int64),
            "prompt_tokens": length if prefill else np.ones(n, dtype=np.int64),
            "output_tokens": np.ones(n, dtype=np.int64),
            "gpu": np.full(n, "h100_sxm"),
        }
    )
    ops = forward_ops(cols, "prefill" if prefill else "decode", None if prefill else length)
    by_name = {o.name: o for o in ops}
    op = by_name["attention/core_sliding"]
    assert (op.count == 1).all() and (by_name["attention/core"].count == 0).all()
    return op


@pytest.fixture(scope="module")
def windowed(data_dir: Path) -> dict[str, pd.DataFrame]:
    """Measured rows of windowed attention with a bf16 query (the pricer's operator carries
    none other), one beam and no earlier KV, the rows each engine's models fit."""
    from dse.data import load
    from dse.fitting.attention import default_backend_rows

    out = {}
    for kind, t in load(data_dir, ["context_attention", "generation_attention"]).items():
        t = t[t["gpu"].isin(GPUS) & (t["source"] == "aiconfigurator")]
        t = t[(t["window_size"].fillna(0) > 0) & (t["dtype"].astype(str) == "bfloat16")]
        for col, none in (("beam_width", 1), ("past_kv_len", 0)):
            if col in t:
                t = t[t[col].fillna(none) == none]
        parts = [
            sub[default_backend_rows(sub.reset_index(drop=True), str(engine))]
            for (_, engine), sub in t.groupby(["gpu", "engine"], sort=True)
        ]
        out[kind] = _sample(pd.concat(parts), ["gpu", "engine", "kv_cache_dtype"])
    return out


@pytest.mark.parametrize("kind", ["context_attention", "generation_attention"])
@pytest.mark.parametrize(
    ("gpu", "engine"),
    [("h200_sxm", "vllm"), ("h100_sxm", "vllm"), ("b200_sxm", "vllm"),
     ("h100_sxm", "sglang"), ("b200_sxm", "sglang")],
)  # fmt: skip
def test_sliding_window_one_path(
    windowed: dict[str, pd.DataFrame], kind: str, gpu: str, engine: str
) -> None:
    """A sliding layer's attention is priced with its window, at the real length, by the
    functions and inputs `dse validate` scores a measured windowed row with: latency, the H200
    power head (which reads the window) and SGLang's backend (H100: head_dim 256 with a
    window runs Triton) alike (issue 33)."""
    rows = windowed[kind]
    sub = rows[(rows["gpu"] == gpu) & (rows["engine"] == engine)].reset_index(drop=True)
    assert len(sub) >= 100, f"{len(sub)} windowed {kind} rows for {gpu} {engine}"
    assert (sub["window_size"] < sub["isl" if kind == "context_attention" else "kv_len"]).any()
    _check(kind, gpu, sub, _sliding_op(sub, kind), {"engine": engine})


@pytest.mark.parametrize("gpu", GPUS)
def test_moe_one_path(tables: dict[str, pd.DataFrame], gpu: str) -> None:
    rows = tables["moe"]
    sub = rows[
        (rows["gpu"] == gpu)
        & (rows["dtype"] == "bfloat16")
        & (rows["moe_ep_size"] == 1)
        & (rows["distribution"].astype(str).isin(["balanced", "uniform"]))
    ].reset_index(drop=True)
    if sub.empty:
        pytest.skip(f"{gpu}: no MoE table of balanced routing (the pricer's) in the data")
    _check("moe", gpu, sub, _moe_op(sub))


@pytest.mark.parametrize("gpu", ["h100_sxm", "a100_sxm"])
def test_vidur_projections_one_path(data_dir: Path, gpu: str) -> None:
    """vidur's projection GEMM rows as `dse validate` scores them equal the pricer's Level 1 x
    Level 2 item of the same operator (one layer, num_tokens single-token sequences); it
    scored the GEMM table alone before (issue 33 item 5: 18-22% on H100 where the pricer's
    path scores 6-9%)."""
    from dse.data import load
    from dse.fitting.layer_ops import predict_layer_op_rows
    from dse.predict.ops import forward_ops
    from dse.predict.pricing import Pricer
    from dse.spec import columns as C

    names = {
        "attn_pre_proj": "attention/qkv",
        "attn_post_proj": "attention/out",
        "mlp_up_proj": "ffn/gate_up",
        "mlp_down_proj": "ffn/down",
    }
    rows = load(data_dir, ["layer_op"])["layer_op"]
    rows = rows[(rows["gpu"] == gpu) & rows["op"].isin(list(names))]
    rows = rows.sample(min(40, len(rows)), random_state=0).reset_index(drop=True)
    art = Artifact.load(gpu)
    assert art.has("level2.attention_proj") or art.has("level2.ffn_dense")
    got = predict_layer_op_rows(art, "layer_op", rows)["latency_pred_s"].to_numpy(float)
    n = len(rows)
    cols, _ = C.as_columns(
        {
            "d_model": rows["d_model"].to_numpy(np.int64),
            "n_layers": np.ones(n, dtype=np.int64),
            "n_heads": rows["n_heads"].to_numpy(np.int64),
            "n_kv_heads": rows["n_kv_heads"].to_numpy(np.int64),
            "d_ff": rows["d_ff"].to_numpy(np.int64),
            "vocab_size": rows["vocab_size"].to_numpy(np.int64),
            "gated_mlp": rows["gated_mlp"].to_numpy(bool),
            "batch_size": rows["num_tokens"].to_numpy(np.int64),
            "prompt_tokens": np.ones(n, dtype=np.int64),
            "output_tokens": np.ones(n, dtype=np.int64),
            "tensor_parallel": rows["tensor_parallel"].to_numpy(np.int64),
            "gpu": np.full(n, gpu),
        }
    )
    spec = get_gpu(gpu)
    cost = Pricer(spec, art, get_gpu(art.level1_gpu), cols).price(
        forward_ops(cols, "prefill"), "prefill"
    )
    want = np.array(
        [cost.items_s[names[op]][i] for i, op in enumerate(rows["op"].astype(str))], dtype=float
    )
    np.testing.assert_allclose(got, want, rtol=TOL)
