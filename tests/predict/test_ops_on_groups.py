"""Operators built on one row per shape group (`ops.forward_ops(counts=...)`, `ops.op_counts`)
and the metrics-only prediction that prices them (`request._priced_on_groups`,
`Pricer.price_on_groups`): the same operators, counts and numbers as those built on every row."""

from __future__ import annotations

import numpy as np
import pytest

from dse.predict import predict
from dse.predict._rows import ColumnsAt
from dse.predict.ops import forward_ops, op_counts
from dse.predict.request import OUTPUT_KEYS, decode_nodes, node_strata
from dse.spec import columns as C
from tests.predict.test_golden_small import golden_configs

# Hybrid layer patterns (sliding, linear, parallel), MLA and MoE beside the golden dense ones.
EXTRA = [
    {"attention_pattern": "sliding*3,full", "sliding_window": 1024},
    {"attention_pattern": "linear*3,full", "linear_kind": "mamba2", "linear_n_groups": 8},
    {"attention_pattern": "linear*2,full", "linear_kind": "mamba1"},
    {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
     "v_head_dim": 128, "n_kv_heads": 32, "n_heads": 32},
    {"n_experts": 64, "top_k": 4, "d_ff_expert": 1408, "shared_expert_d_ff": 2816},
]  # fmt: skip


def _mixed(n: int = 60) -> C.Configs:
    """Golden configurations on one GPU, a few rows each turned into one of EXTRA's."""
    cfg = golden_configs(n)
    rows = [{k: v[i].item() for k, v in cfg.items()} for i in range(n)]
    for i, r in enumerate(rows):
        r["gpu"], r["engine"] = "h100_sxm", "vllm"
        if i % 4 == 0:
            r.update(EXTRA[(i // 4) % len(EXTRA)])
    names = sorted({k for r in rows for k in r})
    cols, _ = C.as_columns({k: [r[k] if k in r else C.DEFAULTS[k] for r in rows] for k in names})
    return cols


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_operators_on_some_rows_with_every_rows_counts(phase: str) -> None:
    """Built on rows `at` with the counts of every row: the operators of every row, in order,
    with every row's counts and the sizes those rows have in the whole batch, bit for bit."""
    cols = _mixed()
    n = cols.n
    kw: dict[str, object] = {}
    kv_at: dict[str, object] = {}
    if phase == "decode":
        nodes, _ = decode_nodes(cols["prompt_tokens"].astype(float) + 1.0,
                                np.maximum(cols["output_tokens"] - 1.0, 0.0))  # fmt: skip
        kw = {"kv_len": nodes, "stratum": node_strata(len(nodes))}
    at = np.arange(1, n, 3)
    if phase == "decode":
        kv_at = {"kv_len": kw["kv_len"].take(at, axis=1), "stratum": kw["stratum"]}  # type: ignore[attr-defined]
    whole = forward_ops(cols, phase, **kw)  # type: ignore[arg-type]
    part = forward_ops(ColumnsAt(cols, at), phase, counts=op_counts(cols), **kv_at)  # type: ignore[arg-type]
    assert [(o.name, o.kind, o.block) for o in part] == [(o.name, o.kind, o.block) for o in whole]
    for w, p in zip(whole, part, strict=True):
        assert np.array_equal(np.broadcast_to(w.count, (n,)), p.count), w.name

        def at_rows(v: object) -> object:
            a = np.asarray(v)
            return a.take(at, axis=-1) if a.ndim and a.shape[-1] == n else a

        for x, y in ((w.flops, p.flops), (w.bytes, p.bytes)):
            assert np.array_equal(at_rows(x), y, equal_nan=True), w.name
        assert list(w.dims) == list(p.dims), w.name
        for k in w.dims:
            a, b = np.asarray(at_rows(w.dims[k])), np.asarray(p.dims[k])
            same = np.array_equal(a, b) if a.dtype.kind in "OUSb" else np.array_equal(a, b, True)
            assert same, (w.name, k)


@pytest.mark.parametrize("depths", [(2, 4, 8, 12, 32), (24, 40)])
def test_metrics_only_of_depths_equals_the_full_prediction(depths: tuple[int, ...]) -> None:
    """A grouped batch of architectures at several depths (shape groups of len(depths) rows;
    shallow sliding patterns run no sliding layer at some depths: those batches are built on
    every row): the metrics alone equal the full prediction's (within the float32 MLPs'
    layout round-off where the groups are keyed on other columns)."""
    base = _mixed(40)
    idx = np.repeat(np.arange(base.n), len(depths))
    cols = {k: np.asarray(v).take(idx) for k, v in base.items() if k in C.CONFIG_FIELDS}
    cols["n_layers"] = np.tile(np.asarray(depths), base.n)
    checked, _ = C.as_columns(cols)
    full = predict(checked, texts=False)
    lean = predict(checked, texts=False, metrics_only=True)
    assert tuple(lean) == OUTPUT_KEYS
    for k in OUTPUT_KEYS:
        np.testing.assert_allclose(lean[k], full[k], rtol=1e-6, atol=0, err_msg=k)
