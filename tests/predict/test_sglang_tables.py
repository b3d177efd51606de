"""`engine: sglang` priced by SGLang's own kernel tables (issue 35): on H100 and B200 the
artifacts ship SGLang 0.5.14's GEMM, prefill / decode attention and bf16 MoE models, and an
SGLang configuration's operators are priced by them (`adapters.OWN_TABLE_ENGINES`); vLLM and
TensorRT-LLM configurations keep vLLM's tables (the golden files hold them); a batch mixing
engines prices each configuration as if alone; the totals stay physical.
"""

from __future__ import annotations

import numpy as np
import pytest

from dse.models.artifact import Artifact
from dse.predict import predict
from dse.predict.adapters import price_context_attention, price_gemm, price_moe
from dse.predict.artifacts import resolve_artifact
from dse.predict.ops import Op
from dse.predict.pricing import Pricer, batch_engine
from dse.resources import surrogates_dir
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu

GPUS = ("h100_sxm", "b200_sxm")
# what each artifact must ship for SGLang (GEMM dtypes: those its table measured)
SGLANG_MODELS = {
    "h100_sxm": ("gemm.sglang.bfloat16", "gemm.sglang.fp8", "gemm.sglang.fp8_block"),
    "b200_sxm": (
        "gemm.sglang.bfloat16",
        "gemm.sglang.fp8",
        "gemm.sglang.fp8_block",
        "gemm.sglang.nvfp4",
    ),
}
KERNEL_MODELS = ("context_attention.sglang", "generation_attention.sglang", "moe.sglang.bfloat16")
# the attention backend SGLang runs for head_dim 128 GQA (`dse.models.attention_backend`), which
# `kernel_models` names with the attention models: "context_attention.sglang[fa3]"
DEFAULT_BACKEND = {"h100_sxm": "fa3", "b200_sxm": "trtllm_mha"}
pytestmark = pytest.mark.skipif(
    not all((surrogates_dir() / g / "manifest.json").is_file() for g in GPUS),
    reason="h100_sxm / b200_sxm artifacts absent",
)
RTOL = 1e-6  # float32 MLPs across batch layouts (tests/predict/test_golden_small.py)
DENSE, MOE = "Llama-3-8B", "Mixtral-8x7B"


def _artifact(gpu: str) -> Artifact:
    art, _ = resolve_artifact(gpu, "auto")
    assert art is not None
    return art


def _rows(configs: list[dict]) -> dict[str, list]:
    """Columns of configurations given as (model, engine, gpu, workload overrides) dicts."""
    rows: dict[str, list] = {}
    for c in configs:
        row = {
            **lookup_model(c["model"]).to_dict(),
            "batch_size": 8,
            "prompt_tokens": 1024,
            "output_tokens": 64,
            "tensor_parallel": 1,
            **{k: v for k, v in c.items() if k != "model"},
        }
        for k, v in row.items():
            rows.setdefault(k, []).append(v)
    assert all(len(v) == len(configs) for v in rows.values())  # every config sets every key
    return rows


@pytest.mark.parametrize("gpu", GPUS)
def test_the_artifacts_ship_sglang_kernel_models_with_held_out_scores(gpu: str) -> None:
    art = _artifact(gpu)
    for name in (*SGLANG_MODELS[gpu], *KERNEL_MODELS):
        assert art.has(name), (gpu, name)
        cv = art.manifest["models"][name]["cv"]
        assert np.isfinite(cv["latency_mape_pct"]), (gpu, name, cv)
        assert "not run" not in str(cv.get("scheme", "")), (gpu, name)


# The quantised SGLang GEMM models refitted with stage 1's activation-quantisation term
# (docs/dev/accuracy-journal.md "SGLang GEMM with the activation quantisation"): each carries the
# term, and its CV by (n, k) is below the value of the model fitted without it (before the refit).
QUANT_REFITTED = {
    ("h100_sxm", "gemm.sglang.fp8"): 5.004,
    ("h100_sxm", "gemm.sglang.fp8_block"): 5.459,
    ("b200_sxm", "gemm.sglang.fp8"): 7.646,
    ("b200_sxm", "gemm.sglang.nvfp4"): 7.487,
}


@pytest.mark.parametrize(("gpu", "name"), sorted(QUANT_REFITTED))
def test_the_refitted_sglang_gemm_models_carry_the_quantisation_term(gpu: str, name: str) -> None:
    art = _artifact(gpu)
    entry = art.manifest["models"][name]
    coef = entry["coefficients"]
    assert coef["quant_efficiency"] > 0 and coef["quant_row_s"] > 0, (gpu, name, coef)
    assert len(art.model(name).theta_) == 6, (gpu, name)  # the 4-coefficient base + t_q's 2
    assert entry["cv"]["latency_mape_pct"] < QUANT_REFITTED[(gpu, name)], (gpu, name, entry["cv"])


@pytest.mark.parametrize("gpu", GPUS)
def test_sglang_configurations_name_the_sglang_tables(gpu: str) -> None:
    """`kernel_models` (what `dse predict` prints): the SGLang row's GEMMs, attention and MoE
    by SGLang's tables, the vLLM and TensorRT-LLM rows' by vLLM's."""
    engines = ["sglang", "vllm", "trtllm"]
    p = predict(
        _rows([{"model": MOE, "engine": e, "gpu": gpu, "tensor_parallel": 2} for e in engines]),
        models=True,
    )
    used = [set(t.split(",")) for t in p["kernel_models"]]
    b = DEFAULT_BACKEND[gpu]
    attention = {f"context_attention.sglang[{b}]", f"generation_attention.sglang[{b}]"}
    # the MoE model names the kernel it priced (`dse.models.moe_kernels`): Mixtral's top-k 2
    # runs Triton's fused MoE on both GPUs
    want = {"gemm.sglang.bfloat16", f"{KERNEL_MODELS[2]}[triton]", *attention}
    assert want <= used[0], used[0]
    vllm_left = {m for m in used[0] if ".vllm." in m or m.endswith(".vllm")}
    if gpu == "h100_sxm":  # H100's share has no SGLang all-reduce table: vLLM's custom one
        vllm_left = {m for m in vllm_left if not m.startswith("allreduce.")}
    assert not vllm_left, used[0]
    for other in used[1:]:
        assert {"gemm.vllm.bfloat16", "context_attention.vllm", "moe.vllm.bfloat16"} <= other
        assert not any("sglang" in m for m in other), other
    if gpu == "b200_sxm":  # B200 ships SGLang's custom all-reduce too
        assert "allreduce.sglang.custom.sglang_graph" in used[0]
    # the engine-not-fitted flag of Level 3 stays (no SGLang end-to-end rows in the data)
    assert "level3: engine not fitted" in p["out_of_range_inputs"][0]
    assert "engine not fitted" not in p["out_of_range_inputs"][1]


@pytest.mark.parametrize("gpu", GPUS)
def test_sglang_operators_cost_what_the_sglang_tables_say(gpu: str) -> None:
    """Adapter by adapter: with ctx engine sglang the price is the SGLang model's own
    prediction at the shape, without it the vLLM model's; the two differ by what the
    tables differ (more than a rounding error, at least at one shape)."""
    art = _artifact(gpu)
    spec = get_gpu(gpu)
    m = np.array([1.0, 64.0, 2048.0])
    n, k = np.full(3, 6144.0), np.full(3, 4096.0)
    op = Op("g", "gemm", "b", np.ones(3), m * n * k * 2, (m * k + n * k + m * n) * 2,
            {"m": m, "n": n, "k": k, "dtype": np.array(["bfloat16"] * 3)})  # fmt: skip
    sg = price_gemm(art, op, spec, {"engine": "sglang"})
    vl = price_gemm(art, op, spec, None)
    assert sg is not None and vl is not None
    assert sg.model == "gemm.sglang.bfloat16" and vl.model == "gemm.vllm.bfloat16"
    want = art.model("gemm.sglang.bfloat16").predict(m, n, k)["latency_s"]
    np.testing.assert_allclose(sg.latency_s, want, rtol=RTOL)
    np.testing.assert_allclose(vl.latency_s, art.model("gemm.vllm.bfloat16").predict(m, n, k)[
        "latency_s"], rtol=RTOL)  # fmt: skip
    assert np.max(np.abs(np.log(sg.latency_s / vl.latency_s))) > 1e-3
    # an engine without its own tables (TensorRT-LLM) keeps vLLM's
    tr = price_gemm(art, op, spec, {"engine": "trtllm"})
    assert tr is not None and tr.model == vl.model
    np.testing.assert_array_equal(tr.latency_s, vl.latency_s)

    b = np.array([1.0, 8.0])
    att = Op("a", "attention_prefill", "b", np.ones(2), np.ones(2), np.ones(2),
             {"batch_size": b, "num_heads": np.full(2, 32.0), "num_kv_heads": np.full(2, 8.0),
              "head_dim": np.full(2, 128.0), "kv_dtype": np.array(["bfloat16"] * 2),
              "isl": np.full(2, 1024.0)})  # fmt: skip
    sa = price_context_attention(art, att, spec, {"engine": "sglang"})
    va = price_context_attention(art, att, spec, {"engine": "vllm"})
    assert sa is not None and va is not None
    b = DEFAULT_BACKEND[gpu]
    assert (sa.model, va.model) == (f"context_attention.sglang[{b}]", "context_attention.vllm")
    assert np.max(np.abs(np.log(sa.latency_s / va.latency_s))) > 1e-3

    t = np.array([8.0, 256.0])
    moe = Op("m", "moe", "b", np.ones(2), np.ones(2), np.ones(2),
             {"num_tokens": t, "hidden_size": np.full(2, 4096.0), "inter_size": np.full(2, 14336.0),
              "topk": np.full(2, 2.0), "num_experts": np.full(2, 8.0),
              "moe_tp_size": np.ones(2), "weight_bytes": np.full(2, 2.0)})  # fmt: skip
    sm = price_moe(art, moe, spec, {"engine": "sglang"})
    vm = price_moe(art, moe, spec, None)
    assert sm is not None and vm is not None
    assert (sm.model, vm.model) == ("moe.sglang.bfloat16[triton]", "moe.vllm.bfloat16")
    assert np.max(np.abs(np.log(sm.latency_s / vm.latency_s))) > 1e-3


@pytest.mark.parametrize("gpu", GPUS)
def test_sglang_moe_is_priced_by_the_model_of_the_kernel_sglang_runs(gpu: str) -> None:
    """The kernel is an input (issue 35, `dse.models.moe_kernels`): each configuration's MoE
    is priced by the model of the kernel the rule names for it (B200: FlashInfer's TRT-LLM MoE
    from top-k 8, H100: FlashInfer's CUTLASS MoE from top-k 16, else Triton), and the price
    names it."""
    art = _artifact(gpu)
    spec = get_gpu(gpu)
    model = art.model("moe.sglang.bfloat16")
    other = {"b200_sxm": "flashinfer_trtllm", "h100_sxm": "flashinfer_cutlass"}[gpu]
    topk = np.array([2.0, 22.0, 2.0, 22.0])
    d = {"num_tokens": np.array([8.0, 8.0, 256.0, 256.0]), "hidden_size": np.full(4, 4096.0),
         "inter_size": np.full(4, 2048.0), "topk": topk, "num_experts": np.full(4, 512.0),
         "moe_tp_size": np.ones(4), "weight_bytes": np.full(4, 2.0)}  # fmt: skip
    op = Op("m", "moe", "b", np.ones(4), np.ones(4), np.ones(4), d)
    got = price_moe(art, op, spec, {"engine": "sglang"})
    assert got is not None
    names = got.model.split("+")
    assert sorted(names) == sorted(f"moe.sglang.bfloat16[{k}]" for k in (other, "triton"))
    assert got.model_rows is not None
    assert [names[i] for i in got.model_rows] == [
        f"moe.sglang.bfloat16[{k}]" for k in ("triton", other, "triton", other)
    ]
    for i in range(4):
        kern = "triton" if topk[i] == 2 else other
        one = {k: v[i] for k, v in d.items() if k != "weight_bytes"}
        want = model.models_[kern].predict(**{**one, "moe_ep_size": 1.0})["latency_s"]
        np.testing.assert_allclose(got.latency_s[..., i], want, rtol=RTOL)


# SGLang's quantised MoE models each artifact ships, and the model that prices an SGLang MoE
# block of that weight dtype (issue 35): fp8 (1-byte weights) by the fp8_block table, one model
# per kernel on B200 (the kernel named as bf16's is), nvfp4 by the nvfp4 table (TRT-LLM only)
SGLANG_QUANT_MOE = {
    "b200_sxm": {1.0: "moe.sglang.fp8_block", 0.5625: "moe.sglang.nvfp4"},
    "h100_sxm": {1.0: "moe.sglang.fp8_block"},
}


@pytest.mark.parametrize("gpu", GPUS)
def test_the_artifacts_ship_sglang_quantised_moe_models_with_held_out_scores(gpu: str) -> None:
    art = _artifact(gpu)
    for name in SGLANG_QUANT_MOE[gpu].values():
        entry = art.manifest["models"][name]
        assert np.isfinite(entry["cv"]["latency_mape_pct"]), (gpu, name, entry["cv"])
        assert entry["moe_dtype"] == name.rsplit(".", 1)[1]
    if gpu == "b200_sxm":  # both kernels ran fp8_block's layouts: one model per kernel
        entry = art.manifest["models"]["moe.sglang.fp8_block"]
        assert entry["kind"] == "moe_kernels"
        assert sorted(entry["kernels"]) == ["flashinfer_trtllm", "triton"]


@pytest.mark.parametrize("gpu", GPUS)
def test_sglang_quantised_moe_is_priced_by_sglang_s_table_of_its_weight_dtype(gpu: str) -> None:
    """An SGLang MoE block of fp8 weights is priced by SGLang's fp8_block model (on B200 by the
    model of the kernel the rule names: Triton at top-k 2, FlashInfer's TRT-LLM MoE at 22), of
    nvfp4 weights by its nvfp4 model; a vLLM configuration of the same weights keeps vLLM's
    lookup (fp8: its bf16 table, as before)."""
    art = _artifact(gpu)
    spec = get_gpu(gpu)
    topk = np.array([2.0, 22.0])
    for wb, name in SGLANG_QUANT_MOE[gpu].items():
        d = {"num_tokens": np.array([8.0, 256.0]), "hidden_size": np.full(2, 4096.0),
             "inter_size": np.full(2, 2048.0), "topk": topk, "num_experts": np.full(2, 512.0),
             "moe_tp_size": np.ones(2), "weight_bytes": np.full(2, wb)}  # fmt: skip
        op = Op("m", "moe", "b", np.ones(2), np.ones(2), np.ones(2), d)
        got = price_moe(art, op, spec, {"engine": "sglang"})
        assert got is not None
        model = art.model(name)
        if hasattr(model, "kernels"):  # one model per kernel: each configuration names its own
            kern = [str(k) for k in model.kernels(topk=topk)]
            names = got.model.split("+")
            assert got.model_rows is not None and len(set(kern)) == 2
            assert [names[i] for i in got.model_rows] == [f"{name}[{k}]" for k in kern]
        else:
            assert got.model == name, (gpu, wb, got.model)
        one = {k: v for k, v in d.items() if k != "weight_bytes"}
        want = model.predict(**one, moe_ep_size=np.ones(2))["latency_s"]
        np.testing.assert_allclose(got.latency_s, want, rtol=RTOL)
        vllm = price_moe(art, op, spec, None)
        assert vllm is not None and "sglang" not in vllm.model
        if wb == 1.0:
            assert vllm.model == "moe.vllm.bfloat16"


def test_sglang_fp8_moe_configurations_name_the_fp8_block_kernel_model() -> None:
    """End to end (`kernel_models`, what `dse predict` prints): a B200 SGLang Mixtral of fp8
    weights names SGLang's fp8_block model and the kernel that priced it (top-k 2: Triton); of
    bf16 weights the bf16 model, with vLLM's bf16 table for vLLM's fp8 row."""
    p = predict(
        _rows(
            [
                {"model": MOE, "engine": "sglang", "gpu": "b200_sxm", "weight_dtype": "fp8"},
                {"model": MOE, "engine": "sglang", "gpu": "b200_sxm", "weight_dtype": "bfloat16"},
                {"model": MOE, "engine": "vllm", "gpu": "b200_sxm", "weight_dtype": "fp8"},
            ]
        ),
        models=True,
    )
    used = [set(t.split(",")) for t in p["kernel_models"]]
    assert "moe.sglang.fp8_block[triton]" in used[0], used[0]
    assert "moe.sglang.bfloat16[triton]" in used[1], used[1]
    assert "moe.vllm.bfloat16" in used[2] and not any("sglang" in m for m in used[2]), used[2]


def test_a_pricer_refuses_a_batch_mixing_own_table_engines_with_others() -> None:
    assert batch_engine({"engine": np.array(["sglang", "sglang"])}) == "sglang"
    assert batch_engine({"engine": np.array(["vllm", "trtllm"])}) is None
    assert batch_engine(None) is None
    with pytest.raises(ValueError, match="mixing engines"):
        Pricer(get_gpu("h100_sxm"), None, cols={"engine": np.array(["vllm", "sglang"])})


def _mixed_configs() -> list[dict]:
    out = []
    for gpu in GPUS:
        for model in (DENSE, MOE):
            for engine in ("sglang", "vllm", "trtllm"):
                out.append({"model": model, "engine": engine, "gpu": gpu, "tensor_parallel": 2})
    out.append({"model": DENSE, "engine": "sglang", "gpu": "h100_sxm", "weight_dtype": "fp8",
                "kv_dtype": "fp8", "batch_size": 32})  # fmt: skip
    out.append({"model": DENSE, "engine": "sglang", "gpu": "b200_sxm", "weight_dtype": "nvfp4"})
    return out


def _assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray], rows: np.ndarray) -> None:
    for key, v in b.items():
        got = np.asarray(a[key])[rows]
        if np.asarray(v).dtype.kind == "f":
            np.testing.assert_allclose(got, v, rtol=RTOL, atol=1e-15, err_msg=key)
        else:
            assert [str(x) for x in got] == [str(x) for x in v], key


def test_a_mixed_batch_prices_each_configuration_as_if_alone() -> None:
    """SGLang, vLLM and TensorRT-LLM rows on H100 and B200 (dense and MoE, bf16, fp8, nvfp4)
    in one batch: every output of every row equals that row predicted alone."""
    configs = _mixed_configs()
    both = predict(_rows(configs), models=True)
    for i, c in enumerate(configs):
        _assert_same(both, predict(_rows([c]), models=True), np.array([i]))


@pytest.mark.slow
def test_a_large_mixed_batch_prices_each_engine_as_its_own_batch() -> None:
    """Above the stacking size (64 rows: the grouped path) a mixed batch equals its SGLang and
    other rows each predicted as a batch of their own."""
    rng = np.random.default_rng(35)
    configs = []
    for _ in range(150):
        configs.append(
            {
                "model": str(rng.choice([DENSE, MOE])),
                "engine": str(rng.choice(["sglang", "vllm", "trtllm"])),
                "gpu": str(rng.choice(GPUS)),
                "batch_size": int(rng.choice([1, 16, 64])),
                "prompt_tokens": int(rng.choice([256, 2048])),
                "output_tokens": int(rng.choice([16, 256])),
                "tensor_parallel": int(rng.choice([1, 2, 4])),
            }
        )
    both = predict(_rows(configs), models=True)
    sglang = np.array([c["engine"] == "sglang" for c in configs])
    for rows in (np.flatnonzero(sglang), np.flatnonzero(~sglang)):
        _assert_same(both, predict(_rows([configs[i] for i in rows]), models=True), rows)


GRID = [
    (gpu, model, dtype)
    for gpu in GPUS
    for model in (DENSE, MOE)
    for dtype in ("bfloat16", "fp8", *(("nvfp4",) if gpu == "b200_sxm" else ()))
]


@pytest.mark.parametrize(("gpu", "model", "dtype"), GRID)
def test_sglang_predictions_stay_physical(gpu: str, model: str, dtype: str) -> None:
    """Over batch x prompt x tensor parallelism: power per GPU between idle and board power in
    each phase, the phases summing to the whole; TPOT no faster than streaming the GPU's weight
    shard once; TTFT no faster than the prompt's linear-layer FLOPs at the dtype's peak."""
    from dse.predict.pricing import gemm_peak

    spec = get_gpu(gpu)
    configs = [
        {"model": model, "engine": "sglang", "gpu": gpu, "weight_dtype": dtype,
         "batch_size": b, "prompt_tokens": p, "output_tokens": 32, "tensor_parallel": tp}
        for b in (1, 64) for p in (128, 4096) for tp in (1, 4)
    ]  # fmt: skip
    cols, _ = C.as_columns(_rows(configs))
    p = predict(cols, models=True)
    assert all("gemm.sglang." in t for t in p["kernel_models"])
    tp = cols["tensor_parallel"].astype(float)
    decode_s = p["latency_s"] - p["ttft_s"]
    for e, t in ((p["prefill_energy_j"], p["ttft_s"]), (p["decode_energy_j"], decode_s)):
        w = np.asarray(e) / (np.asarray(t) * tp)
        assert np.all(w >= spec.idle_power_w * (1 - 1e-9)), (gpu, dtype, w)
        assert np.all(w <= spec.board_power_w * (1 + 1e-9)), (gpu, dtype, w)
    np.testing.assert_allclose(p["prefill_energy_j"] + p["decode_energy_j"], p["energy_j"])
    a = C.architecture(cols)
    # active weights: an MoE decode step reads at least top_k experts' worth
    pb = A.param_breakdown(a)
    active = np.asarray(pb["active"], dtype=float) / tp * A.dtype_bytes(a.weight_dtype)
    assert np.all(p["tpot_s"] >= active / spec.hbm_bw_bytes_per_s), (gpu, dtype)
    linear = np.asarray(pb["active"]) - np.asarray(pb["embedding"])
    tokens = cols["batch_size"] * cols["prompt_tokens"]
    gdt = "nvfp4" if dtype == "nvfp4" else ("fp8" if dtype == "fp8" else "bfloat16")
    floor = 2 * linear * tokens / tp / gemm_peak(gdt, spec)
    assert np.all(p["ttft_s"] >= floor), (gpu, dtype, p["ttft_s"], floor)
