"""Which model prices which MoE table (sessions 13, 14): TensorRT-LLM's CUTLASS MoE tables and
the vLLM tables most of whose rows ran FlashInfer's CUTLASS MoE (separate kernels whose times
add) by the kernel-sum model `dse.models.moe_physics` (kind "moe_physics"), every vLLM Triton
table (one fused kernel) and a table with too few layouts for the inner CV by `dse.models.moe`
(kind "moe"); the kernel-sum state round trip, its out-of-range flags
(combinations of inputs included) in the Level-1 adapter and the kernel bands."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dse.fitting import moe as fit_moe
from dse.fitting.validate import outside_fit
from dse.models import model_class, moe, moe_physics
from dse.models.artifact import Artifact
from dse.predict.adapters import _search_model, price_moe
from dse.predict.ops import Op
from dse.resources import surrogates_dir
from dse.spec.hardware import get_gpu

TRT_KERNEL_SUM = ("moe.trtllm.bfloat16", "moe.trtllm.fp8", "moe.trtllm.fp8_block")
# vLLM tables most of whose rows ran FlashInfer's CUTLASS MoE (session 14): the kernel sum too
VLLM_KERNEL_SUM = {"h100_sxm": ("moe.vllm.fp8", "moe.vllm.fp8_block")}


def _artifacts() -> dict[str, Artifact]:
    root = surrogates_dir()
    return {d.parent.name: Artifact.load(d.parent) for d in sorted(root.glob("*/manifest.json"))}


ARTIFACTS = _artifacts()


@pytest.fixture(scope="module")
def h100() -> Artifact:
    if "h100_sxm" not in ARTIFACTS:
        pytest.skip("no h100_sxm artifact")
    return ARTIFACTS["h100_sxm"]


def _moe_kinds(art: Artifact) -> dict[str, str]:
    return {n: e["kind"] for n, e in art.manifest["models"].items() if n.startswith("moe.")}


def test_h100_trtllm_tables_are_the_kernel_sum_and_vllm_tables_the_fused_model(h100) -> None:
    kinds = _moe_kinds(h100)
    for name in TRT_KERNEL_SUM:
        assert kinds[name] == "moe_physics", name
        assert type(h100.model(name)) is moe_physics.MoEModel
        assert isinstance(h100.model(name).roof_, moe_physics.KernelSum)
    vllm = [n for n in kinds if n.startswith("moe.vllm.")]
    assert len(vllm) == 5
    for name in vllm:
        want = "moe_physics" if name in VLLM_KERNEL_SUM["h100_sxm"] else "moe"
        assert kinds[name] == want, name
        assert type(h100.model(name)).kind == want
    # fp8: one backend, one kernel-sum model; fp8_block: a kernel-sum model per backend, a row
    # priced by the one its split dispatches to (moe_physics.backend_split)
    assert isinstance(h100.model("moe.vllm.fp8").roof_, moe_physics.KernelSum)
    parts = h100.model("moe.vllm.fp8_block").parts_
    assert set(parts) == set(moe_physics.PARTS)
    assert all(isinstance(m.roof_, moe_physics.KernelSum) for m in parts.values())
    for name in VLLM_KERNEL_SUM["h100_sxm"]:
        assert any(
            "flashinfer_cutlass" in s for s in h100.manifest["models"][name]["kernel_sources"]
        )
    # one layout (2880/2880/4/32): no inner CV over layouts is possible, the fused model stays
    assert kinds["moe.trtllm.w4a16_mxfp4"] == "moe"


@pytest.mark.parametrize("gpu", sorted(ARTIFACTS))
def test_every_artifact_prices_vllm_triton_moe_by_the_fused_model(gpu: str) -> None:
    for name, kind in _moe_kinds(ARTIFACTS[gpu]).items():
        if name.startswith("moe.vllm."):
            want = "moe_physics" if name in VLLM_KERNEL_SUM.get(gpu, ()) else "moe"
            assert kind == want, (gpu, name)
        if name in TRT_KERNEL_SUM:
            assert kind == "moe_physics", (gpu, name)


def _table(engine: str, n_layouts: int, kernel_source: str = "") -> pd.DataFrame:
    return pd.DataFrame(
        {
            "engine": engine,
            "kernel_source": kernel_source,
            "hidden_size": 1024.0 * (1 + np.arange(n_layouts)),
            "inter_size": 2048.0,
            "topk": 8.0,
            "num_experts": 128.0,
        }
    )


def test_the_class_follows_the_engines_kernels_and_the_layout_count() -> None:
    n = fit_moe.MIN_KERNEL_SUM_LAYOUTS
    assert fit_moe.model_class_of("trtllm", _table("trtllm", n)) is moe_physics.MoEModel
    assert fit_moe.model_class_of("trtllm", _table("trtllm", n - 1)) is moe.MoEModel
    assert fit_moe.model_class_of("vllm", _table("vllm", 14)) is moe.MoEModel
    triton = "vllm_unquantizedfusedmoe_triton_tritonexperts"
    cutlass = "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"
    assert fit_moe.model_class_of("vllm", _table("vllm", 14, triton)) is moe.MoEModel
    assert fit_moe.model_class_of("vllm", _table("vllm", 14, cutlass)) is moe_physics.MoEModel
    assert fit_moe.model_class_of("vllm", _table("vllm", n - 1, cutlass)) is moe.MoEModel
    # a table of both backends (H100 vLLM fp8_block: expert-parallel splits ran CUTLASS): the
    # backend of most rows
    mixed = _table("vllm", 10, triton)
    mixed.loc[:5, "kernel_source"] = cutlass
    assert fit_moe.kernel_sum_backend_share(mixed) == 0.6
    assert fit_moe.model_class_of("vllm", mixed) is moe_physics.MoEModel
    mixed.loc[5, "kernel_source"] = triton
    assert fit_moe.model_class_of("vllm", mixed) is moe.MoEModel
    assert fit_moe.kernel_sum_backend_share(_table("vllm", 3).drop(columns="kernel_source")) == 0
    assert model_class("moe_physics") is moe_physics.MoEModel


def _inputs(n: int = 9) -> dict[str, np.ndarray]:
    return {
        "num_tokens": np.geomspace(1, 32768, n),
        "hidden_size": np.full(n, 4096.0),
        "inter_size": np.full(n, 14336.0),
        "topk": np.full(n, 2.0),
        "num_experts": np.full(n, 8.0),
        "moe_tp_size": np.array([1.0, 2, 4, 8, 1, 2, 4, 8, 1])[:n],
    }


@pytest.mark.parametrize("name", (*TRT_KERNEL_SUM, *VLLM_KERNEL_SUM["h100_sxm"]))
def test_kernel_sum_state_round_trips_exactly(h100, name: str) -> None:
    model = h100.model(name)
    state = model.to_state()
    again = moe_physics.MoEModel.from_state(state)
    s2 = again.to_state()
    assert s2.keys() == state.keys()
    for key in state:
        a, b = np.asarray(state[key]), np.asarray(s2[key])
        assert a.dtype == b.dtype and a.shape == b.shape, key
        np.testing.assert_array_equal(a, b, err_msg=key)
    assert again.use_residual_ == model.use_residual_
    for dist in ("uniform", "balanced", "power_law_1.2"):
        p, q = (
            model.predict(**_inputs(), distribution=dist),
            again.predict(**_inputs(), distribution=dist),
        )
        assert list(p) == list(q)
        for key in p:
            np.testing.assert_array_equal(np.asarray(p[key]), np.asarray(q[key]), err_msg=key)
    # the manifest records the combination inputs' range with the plain inputs'
    rng = h100.manifest["models"][name]["fitted_range"]
    assert {"experts_per_topk", "tokens_per_expert", "num_tokens", "moe_tp_size"} <= set(rng)


def _trtllm_only(art: Artifact) -> Artifact:
    """A view of `art` whose MoE models are the TensorRT-LLM kernel-sum ones alone."""
    keep = [n for n in art.models if not n.startswith("moe.") or n == "moe.trtllm.bfloat16"]
    return Artifact(
        manifest={**art.manifest, "models": {n: art.manifest["models"][n] for n in keep}},
        models={n: art.models[n] for n in keep},
        path=art.path,
    )


def _moe_op(num_experts: float, topk: float, tokens: np.ndarray) -> Op:
    dims = {
        "num_tokens": tokens,
        "hidden_size": np.full(tokens.shape, 4096.0),
        "inter_size": np.full(tokens.shape, 14336.0),
        "topk": np.full(tokens.shape, topk),
        "num_experts": np.full(tokens.shape, num_experts),
        "moe_tp_size": np.ones(tokens.shape),
    }
    z = np.zeros(tokens.shape)
    return Op("ffn/moe", "moe", "ffn", np.ones(tokens.shape), z, z, dims)


def test_the_adapter_prices_with_the_class_the_artifact_holds_and_flags_out_of_range(h100) -> None:
    # the full artifact: every engine's MoE is priced by the vLLM bf16 table, as before
    assert _search_model(h100, "moe") == "moe.vllm.bfloat16"
    art = _trtllm_only(h100)
    assert _search_model(art, "moe") == "moe.trtllm.bfloat16"
    gpu = get_gpu("h100_sxm")
    inside = price_moe(art, _moe_op(8.0, 2.0, np.array([16.0, 256.0, 4096.0])), gpu)
    assert inside is not None and inside.model == "moe.trtllm.bfloat16"
    want = art.model("moe.trtllm.bfloat16").predict(**{**_inputs(3), "num_tokens": np.array([16.0, 256.0, 4096.0]), "moe_tp_size": np.ones(3)})  # fmt: skip
    np.testing.assert_allclose(inside.latency_s, want["latency_s"], rtol=1e-12)
    assert not inside.out_of_range.any()
    # 512 experts, top-1: each input within its own range, their ratio (512 experts per top-k)
    # beyond any fitted layout's
    rng = art.manifest["models"]["moe.trtllm.bfloat16"]["fitted_range"]
    assert rng["num_experts"][1] >= 512 and rng["topk"][0] <= 1
    assert rng["experts_per_topk"][1] < 512
    sparse = price_moe(art, _moe_op(512.0, 1.0, np.array([256.0, 4096.0])), gpu)
    assert sparse is not None and sparse.out_of_range.all()
    assert set(sparse.misses) == {"experts_per_topk"}


def test_validate_rows_priced_by_their_table_and_banded(h100) -> None:
    rows = pd.DataFrame(
        {
            "gpu": "h100_sxm",
            "engine": ["trtllm", "trtllm", "vllm"],
            "dtype": "bfloat16",
            "num_tokens": [256.0, 1e6, 256.0],  # the second beyond every table's token range
            "hidden_size": 4096.0,
            "inter_size": 14336.0,
            "topk": 2.0,
            "num_experts": 8.0,
            "moe_tp_size": 1.0,
            "moe_ep_size": 1.0,
            "distribution": "balanced",
            "gated": True,
            "kernel_source": ["moe_torch_flow_cutlass", "moe_torch_flow_cutlass", "vllm_x"],
        }
    )
    got = fit_moe.predict_moe_rows(h100, "moe", rows)
    trt = h100.model("moe.trtllm.bfloat16").predict(**moe_physics.moe_inputs(rows.iloc[:2]))
    np.testing.assert_allclose(got["latency_pred_s"].iloc[:2], trt["latency_s"], rtol=1e-12)
    vl = h100.model("moe.vllm.bfloat16").predict(**moe.moe_inputs(rows.iloc[2:]))
    np.testing.assert_allclose(got["latency_pred_s"].iloc[2:], vl["latency_s"], rtol=1e-12)
    assert list(outside_fit("moe", rows, h100)) == [False, True, False]
    if h100.band("moe.trtllm.bfloat16") is not None:  # the band widens outside the range
        lo, hi = got["latency_lo_s"].to_numpy(), got["latency_hi_s"].to_numpy()
        p = got["latency_pred_s"].to_numpy()
        assert (lo[:2] < p[:2]).all() and (p[:2] < hi[:2]).all()
        assert np.log(hi[1] / lo[1]) > np.log(hi[0] / lo[0])
        assert (got["band_model"].iloc[:2] == "moe.trtllm.bfloat16").all()


def test_vllm_cutlass_rows_priced_by_the_kernel_sum(h100) -> None:
    rows = pd.DataFrame(
        {
            "gpu": "h100_sxm",
            "engine": "vllm",
            "dtype": ["fp8", "fp8_block", "bfloat16"],
            "num_tokens": 512.0,
            "hidden_size": 4096.0,
            "inter_size": 14336.0,
            "topk": 2.0,
            "num_experts": 8.0,
            "moe_tp_size": 1.0,
            "moe_ep_size": [1.0, 2.0, 1.0],
            "distribution": "power_law_1.2",
            "gated": True,
            "kernel_source": "vllm_x",
        }
    )
    got = fit_moe.predict_moe_rows(h100, "moe", rows)
    for i, name in enumerate(("moe.vllm.fp8", "moe.vllm.fp8_block")):
        want = h100.model(name).predict(**moe_physics.moe_inputs(rows.iloc[i : i + 1]))
        np.testing.assert_allclose(got["latency_pred_s"].iloc[i], want["latency_s"], rtol=1e-12)
    vl = h100.model("moe.vllm.bfloat16").predict(**moe.moe_inputs(rows.iloc[2:]))
    np.testing.assert_allclose(got["latency_pred_s"].iloc[2:], vl["latency_s"], rtol=1e-12)
    # the Level-1 adapter still prices every engine's MoE block with the vLLM bf16 table
    assert _search_model(h100, "moe") == "moe.vllm.bfloat16"


@pytest.mark.slow
def test_fit_model_refits_only_the_named_models(data_dir, h100) -> None:
    from dse.errors import DataError
    from dse.fitting.run import fit_artifact

    with pytest.raises(DataError, match="existing artifact"):
        fit_artifact(data_dir, "h100_sxm", only=["moe"], models=["moe.trtllm.bfloat16"])
    # a name no table has: every MoE table is skipped (nothing fitted), and it says so
    with pytest.raises(DataError, match=r"moe\.nothing"):
        fit_artifact(data_dir, "h100_sxm", only=["moe"], models=["moe.nothing"], keep=h100)
