"""SGLang's attention backend as an input of its attention models (issue 35): the rule that
reads the backend off a configuration (`dse.models.attention_backend`), that the shipped SGLang
models take it (one-hot MLP inputs) and use it, and that `dse predict` names the backend that
priced each configuration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.fitting.attention import ATTENTION_CLASSES, default_backend_rows
from dse.models.artifact import Artifact
from dse.models.attention import AttentionModel, attention_inputs
from dse.models.attention_backend import SGLANG_BACKENDS, backend_onehot, sglang_backend
from dse.predict.adapters import price_context_attention, price_generation_attention
from dse.predict.ops import Op
from dse.resources import surrogates_dir
from dse.spec.hardware import get_gpu

GPUS = ("h100_sxm", "b200_sxm")


def _v(hd, h, kv, window=0.0, fp8=0.0, kv_bytes=2.0) -> dict[str, np.ndarray]:
    n = len(hd)
    return {
        "head_dim": np.asarray(hd, float),
        "num_heads": np.asarray(h, float),
        "num_kv_heads": np.asarray(kv, float),
        "window_size": np.broadcast_to(np.asarray(window, float), (n,)),
        "fp8": np.broadcast_to(np.asarray(fp8, float), (n,)),
        "kv_bytes": np.broadcast_to(np.asarray(kv_bytes, float), (n,)),
    }


def test_h100_runs_triton_past_fa3s_head_dims_and_on_windowed_256() -> None:
    v = _v([64, 128, 256, 256, 512], [32] * 5, [8] * 5, window=[0, 128, 0, 1024, 0])
    for phase in ("context", "generation"):
        got = sglang_backend("h100_sxm", phase, v)
        assert list(got) == ["fa3", "fa3", "fa3", "triton", "triton"]


def test_b200_rule_by_head_dim_group_and_dtype() -> None:
    # head_dim 192: Triton; 256 with (3, 1): Triton in both phases; (12, 2) / (24, 4): Triton in
    # decode, TRT-LLM MHA in prefill; (12, 4): TRT-LLM MHA in prefill; the rest TRT-LLM MHA
    hd = [128, 192, 256, 256, 256, 256, 256, 256, 512]
    h = [32, 16, 3, 12, 24, 12, 96, 8, 8]
    kv = [8, 2, 1, 2, 4, 4, 1, 8, 1]
    v = _v(hd, h, kv)
    t, m = "triton", "trtllm_mha"
    assert list(sglang_backend("b200_sxm", "generation", v)) == [m, t, t, t, t, t, m, m, m]
    assert list(sglang_backend("b200_sxm", "context", v)) == [m, t, t, m, m, m, m, m, m]
    # bf16 query over an fp8 cache in prefill: FlashInfer to head_dim 128, Triton above
    mixed = _v([64, 128, 256], [32] * 3, [8] * 3, fp8=0.0, kv_bytes=1.0)
    assert list(sglang_backend("b200_sxm", "context", mixed)) == ["flashinfer", "flashinfer", t]
    fp8 = _v([128, 256], [32] * 2, [8] * 2, fp8=1.0, kv_bytes=1.0)
    assert list(sglang_backend("b200_sxm", "context", fp8)) == [m, m]
    assert list(sglang_backend("b200_sxm", "generation", mixed)) == [m, m, m]


def test_the_onehot_columns_follow_the_gpus_backends_and_other_gpus_have_none() -> None:
    v = _v([128, 192], [32, 32], [8, 8])
    cols = backend_onehot("b200_sxm", "generation", v)
    assert len(cols) == len(SGLANG_BACKENDS["b200_sxm"][1]) == 2
    np.testing.assert_array_equal(cols[0], [0.0, 1.0])  # triton
    np.testing.assert_array_equal(cols[1], [0.0, 0.0])  # flashinfer
    assert sglang_backend("h200_sxm", "context", v) is None
    assert backend_onehot("a100_sxm", "context", v) == []


@pytest.fixture(scope="module")
def tables(data_dir: Path) -> dict[str, pd.DataFrame]:
    from dse.data import load

    return load(data_dir, list(ATTENTION_CLASSES))


@pytest.mark.slow
@pytest.mark.parametrize("gpu", GPUS)
def test_the_rule_is_the_measured_backend_on_every_row_the_models_fit(
    gpu: str, tables: dict[str, pd.DataFrame]
) -> None:
    for kind, df in tables.items():
        rows = df[(df["gpu"] == gpu) & (df["engine"] == "sglang")].reset_index(drop=True)
        rows = rows[default_backend_rows(rows, "sglang")].reset_index(drop=True)
        cls = ATTENTION_CLASSES[kind]
        got = sglang_backend(gpu, cls.phase_default, cls()._inputs(attention_inputs(rows)))
        measured = rows["kernel_source"].astype(str).to_numpy()
        assert len(rows) > 1000 and (got == measured).all(), (gpu, kind)


def _artifact(gpu: str) -> Artifact:
    path = surrogates_dir() / gpu
    if not (path / "manifest.json").is_file():
        pytest.skip(f"{path} absent")
    return Artifact.load(path)


def _rows(hd: list[float], h: list[float], kv: list[float]) -> dict[str, np.ndarray]:
    n = len(hd)
    return {
        "batch_size": np.full(n, 8.0),
        "isl": np.full(n, 1024.0),
        "kv_len": np.full(n, 1024.0),
        "num_heads": np.asarray(h, float),
        "num_kv_heads": np.asarray(kv, float),
        "head_dim": np.asarray(hd, float),
    }


@pytest.mark.parametrize("gpu", GPUS)
def test_the_shipped_sglang_models_take_and_use_the_backend(gpu: str) -> None:
    art = _artifact(gpu)
    rows = _rows([128, 192, 256, 512], [32, 16, 3, 8], [8, 2, 1, 1])
    for kind in ATTENTION_CLASSES:
        m = art.model(f"{kind}.sglang")
        assert m.backends_ == SGLANG_BACKENDS[gpu][1], (gpu, kind)
        assert art.model(f"{kind}.vllm").backends_ == ()  # vLLM runs one kernel: no input
        v = m._inputs(rows)
        _, X = m.design(v)
        k = len(m.backends_)
        onehot = np.column_stack(backend_onehot(gpu, m.phase, v))
        np.testing.assert_array_equal(X[:, -k:], onehot)
        # the MLP reads them: zeroing the columns moves the rows of another backend
        other = onehot.any(axis=1)
        assert other.any()
        cleared = X.copy()
        cleared[:, -k:] = 0.0
        moved = np.abs(m.mlp_.predict(X) - m.mlp_.predict(cleared))
        assert moved[other].max() > 0.01 and moved[~other].max() < 1e-9, (gpu, kind, moved)
        # and the state keeps them
        again = AttentionModel.from_state(m.to_state())
        assert again.backends_ == m.backends_
        np.testing.assert_allclose(
            again.predict(**rows)["latency_s"], m.predict(**rows)["latency_s"], rtol=1e-6
        )


def test_predict_names_the_backend_that_priced_each_configuration() -> None:
    art = _artifact("b200_sxm")
    spec = get_gpu("b200_sxm")
    d = {
        "batch_size": np.full(3, 8.0),
        "num_heads": np.array([32.0, 16.0, 3.0]),
        "num_kv_heads": np.array([8.0, 2.0, 1.0]),
        "head_dim": np.array([128.0, 192.0, 256.0]),
        "kv_dtype": np.array(["bfloat16"] * 3),
        "isl": np.full(3, 1024.0),
        "kv_len": np.tile(np.array([[256.0], [1024.0]]), (1, 3)),  # (nodes, configurations)
    }
    one = np.ones(3)
    pre = price_context_attention(art, Op("a", "attention_prefill", "b", one, one, one, d),
                                  spec, {"engine": "sglang"})  # fmt: skip
    assert pre is not None
    names = pre.model.split("+")
    assert names == ["context_attention.sglang[triton]", "context_attention.sglang[trtllm_mha]"]
    assert [names[i] for i in pre.model_rows] == [names[1], names[0], names[0]]
    dec = price_generation_attention(art, Op("a", "attention_decode", "b", one, one, one, d),
                                     spec, {"engine": "sglang"})  # fmt: skip
    assert dec is not None and dec.latency_s.shape == (2, 3)
    names = dec.model.split("+")
    assert [names[i] for i in dec.model_rows] == [
        "generation_attention.sglang[trtllm_mha]",
        "generation_attention.sglang[triton]",
        "generation_attention.sglang[triton]",
    ]
    # vLLM's model has no backend input: its label is the model's name
    vl = price_context_attention(art, Op("a", "attention_prefill", "b", one, one, one, d),
                                 spec, {"engine": "vllm"})  # fmt: skip
    assert vl is not None and vl.model == "context_attention.vllm" and vl.model_rows is None
    assert pd.notna(vl.latency_s).all()
