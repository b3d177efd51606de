"""Held-out CV groups are architecture layouts only (issue 19): every family builds them with
`dse.fitting.cv.architecture_groups` from a declared tuple of architecture fields, never from the
parallel split, dtype, routing, engine, GPU, batch or token count."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting import (
    attention,
    families,  # noqa: F401  (imports every family module: they declare)
    gemm,
    layer_ops,
    level2,
    level3,
    linear_layers,
    mla,
    moe,
)
from dse.fitting import cv as U

FITTING = Path(__file__).resolve().parents[2] / "dse" / "fitting"
# What a held-out group must never name (the brief of issue 19), by what it is.
FORBIDDEN = {
    "parallel split": ("moe_tp_size", "moe_ep_size", "tensor_parallel", "n_gpus"),
    "dtype": ("dtype", "moe_dtype", "kv_cache_dtype"),
    "routing": ("distribution",),
    "engine": ("engine", "engine_version", "kernel_source"),
    "gpu": ("gpu", "device"),
    "batch": ("batch_size",),
    "tokens": ("m", "num_tokens", "isl", "kv_len", "input_tokens", "output_tokens"),
}


def test_every_family_declares_architecture_groups() -> None:
    assert set(U.CV_GROUPS) == {
        "gemm",
        "attention",
        "moe",
        "mla",
        "layer_op",
        "level2",
        "level3",
        "linear_layer",
    }
    forbidden = {f for fields in FORBIDDEN.values() for f in fields}
    assert forbidden <= U.NOT_ARCHITECTURE_FIELDS
    assert not U.ARCHITECTURE_FIELDS & U.NOT_ARCHITECTURE_FIELDS
    for family, fields in U.CV_GROUPS.items():
        for what, names in FORBIDDEN.items():
            assert not set(fields) & set(names), f"{family} CV groups by {what}: {fields}"
        assert set(fields) <= U.ARCHITECTURE_FIELDS, family


def test_the_declared_layouts() -> None:
    assert moe.MOE_SHAPE_GROUP == ("hidden_size", "inter_size", "topk", "num_experts")
    assert attention.HEAD_GROUP == ("num_heads", "num_kv_heads", "head_dim")
    assert mla.HEAD_GROUP == ("num_heads",)  # MLA tables vary the query heads alone
    assert gemm.GEMM_GROUP == ("n", "k")
    assert linear_layers.LAYOUT_GROUP == (
        "n_heads",
        "head_dim",
        "n_groups",
        "state_dim",
        "chunk_size",
    )
    assert layer_ops.LAYER_OP_GROUP == level2.LEVEL2_GROUP == level3.LEVEL3_GROUP == ("model",)
    assert U.CV_GROUPS["moe"] is moe.MOE_SHAPE_GROUP


@pytest.mark.parametrize(
    "fields",
    [
        ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"),
        ("n", "k", "dtype"),
        ("num_heads", "engine"),
        ("model", "batch_size"),
        ("model", "n_gpus"),
        ("hidden_size", "distribution"),
        ("not_a_field",),
        (),
    ],
)
def test_a_non_architecture_field_is_refused(fields: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match="not architecture fields"):
        U.check_architecture_fields(fields)
    with pytest.raises(ValueError):
        U.cv_group("test-only", fields)
    assert "test-only" not in U.CV_GROUPS


def test_one_layout_is_one_group_whatever_it_ran_with() -> None:
    """MoE rows of one layout under two parallel splits, two dtypes and two routings: one group
    (the leak MOE_SHAPE_GROUP had when it held moe_tp_size and moe_ep_size)."""
    rows = pd.DataFrame(
        {
            "hidden_size": [4096] * 4 + [7168],
            "inter_size": [14336] * 4 + [2048],
            "topk": [2] * 4 + [8],
            "num_experts": [8] * 4 + [256],
            "moe_tp_size": [1, 2, 1, 4, 1],
            "moe_ep_size": [1, 1, 8, 1, 1],
            "dtype": ["bfloat16", "fp8", "bfloat16", "fp8", "fp8"],
            "distribution": ["balanced", "power_law_1.2", "balanced", "balanced", "balanced"],
        }
    )
    labels = U.architecture_groups(rows, moe.MOE_SHAPE_GROUP)
    assert len(set(labels[:4])) == 1 and labels[4] != labels[0]
    g = pd.DataFrame({"m": [1, 8, 1], "n": [4096, 4096, 1024], "k": [4096, 4096, 4096]})
    w = gemm.weight_shape_groups(g.assign(dtype=["bfloat16", "fp8", "fp8"]))
    assert w[0] == w[1] != w[2] and w[0] == "4096x4096"  # the labels (and folds) it always had
    kept = pd.DataFrame({"model": ["a", "a", "b"], "batch_size": [1, 64, 1]})
    groups, scheme = level3.power_groups(kept)
    assert scheme == "leave-one-model-out" and groups[0] == groups[1] != groups[2]


def test_schemes_not_by_architecture_are_listed() -> None:
    """The held-out schemes outside the protocol are named (a new one must be added here)."""
    assert set(U.NOT_BY_ARCHITECTURE) == {"gemm by_m", "allreduce", "reduction", "level3.power"}


def test_no_family_builds_groups_itself() -> None:
    """Outside cv.py no fitting module calls `group_labels` (which checks nothing) or groups by a
    column it reads itself: groups come from `architecture_groups`."""
    for path in sorted(FITTING.glob("*.py")):
        if path.name == "cv.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                assert name != "group_labels", f"{path.name}:{node.lineno} calls group_labels"
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("groups", "models", "grp")
                for t in node.targets
            ):
                src = ast.unparse(node.value)
                assert "architecture_groups" in src or "[" not in src or "np.asarray" in src, (
                    f"{path.name}:{node.lineno} builds CV groups from {src}"
                )


def test_labels_are_dense_integers() -> None:
    rows = pd.DataFrame({"model": ["b", "a", "b", "c"]})
    np.testing.assert_array_equal(U.architecture_groups(rows, ("model",)), [1, 0, 1, 2])


def test_a_table_of_one_layout_has_no_held_out_error() -> None:
    """Grouped by layout alone, a table may hold one layout (H100 vLLM int4_wo MoE): its CV
    reads None rather than fitting on no rows."""
    from dse.fitting._hybrid_tables import grouped_cv, hybrid_cv_summary

    rows = pd.DataFrame({"model": ["a"] * 4, "latency_s": [1.0, 2.0, 3.0, 4.0]})

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        raise AssertionError("no fold can be fitted")

    cv = grouped_cv(rows, U.architecture_groups(rows, ("model",)), 3, 0, fp)
    summary = hybrid_cv_summary(rows, cv, "test", np.ones(4))
    assert cv == {} and summary["latency_mape_pct"] is None
