"""`weight_dtype: nvfp4` (issue 35): Blackwell's block-scaled 4-bit weights are a searchable value
with their memory accounting (4-bit values + one fp8 scale per 16 elements: 0.5625 bytes each),
valid only on a GPU with FP4 tensor cores, and never a KV-cache dtype."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dse.errors import ConfigError
from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec import rules as R
from dse.spec.catalogue import lookup_model
from dse.spec.fields import check
from dse.spec.hardware import fp4_gpu_names, get_gpu, gpu_names
from dse.spec.hf import import_hf_config, to_hf_config
from dse.spec.space import count_feasible, load_space

REPO = Path(__file__).resolve().parents[2]
NVFP4_BYTES = (4 + 8 / 16) / 8  # 4-bit e2m1 values + one fp8 (e4m3) scale per 16 elements


def _rows(gpus: list[str], dtypes: list[str], model: str = "Llama-3-8B") -> dict[str, list]:
    """Every (gpu, weight dtype) pair of one catalogue model, batch 8, 1024 + 128 tokens."""
    arch = lookup_model(model).to_dict()
    pairs = [(g, d) for g in gpus for d in dtypes]
    rows = {k: [v] * len(pairs) for k, v in arch.items()}
    rows.update(
        gpu=[g for g, _ in pairs],
        weight_dtype=[d for _, d in pairs],
        batch_size=[8] * len(pairs),
        prompt_tokens=[1024] * len(pairs),
        output_tokens=[128] * len(pairs),
    )
    return rows


def test_nvfp4_weights_take_0_5625_bytes_per_parameter() -> None:
    assert A.dtype_bytes("nvfp4") == pytest.approx(NVFP4_BYTES) == pytest.approx(0.5625)
    a = replace(lookup_model("Llama-3-8B"), weight_dtype="nvfp4")
    params = float(A.total_params(a))
    assert 7.9e9 < params < 8.1e9
    assert float(A.weight_bytes(a)) == pytest.approx(0.5625 * params, rel=1e-12)
    # the engine's memory: this GPU's shard of the weights, a quarter of bf16's and 9/16 of fp8's
    bf16 = replace(lookup_model("Llama-3-8B"), weight_dtype="bfloat16")
    for tp in (1, 2):
        m4 = A.memory_breakdown(a, 8, 1024, 128, tp)["weights"]
        m16 = A.memory_breakdown(bf16, 8, 1024, 128, tp)["weights"]
        assert float(m4) == pytest.approx(0.5625 * float(A.params_per_gpu(a, tp)), rel=1e-12)
        assert float(m4) / float(m16) == pytest.approx(0.5625 / 2.0, rel=1e-12)
    # vectorised: a batch mixing dtypes reads each row's own bytes
    np.testing.assert_allclose(
        A.dtype_bytes(np.array(["bfloat16", "nvfp4", "fp8", "nvfp4"])), [2.0, 0.5625, 1.0, 0.5625]
    )


def test_nvfp4_is_a_weight_dtype_not_a_kv_dtype() -> None:
    assert check("weight_dtype", "nvfp4", "x") == "nvfp4"
    with pytest.raises(ConfigError) as e:
        check("kv_dtype", "nvfp4", "x")
    assert str(e.value) == (
        "x: must be one of float32, bfloat16, float16, fp8, int8, int4 (nvfp4 is a weight "
        "dtype: no engine stores its KV cache in it), got 'nvfp4'"
    )
    with pytest.raises(ConfigError, match=r"\(did you mean 'nvfp4'\?\), got 'fp4'$"):
        check("weight_dtype", "fp4", "x")
    msgs = R.check_architecture({**lookup_model("Llama-3-8B").to_dict(), "kv_dtype": "nvfp4"})
    assert msgs and msgs[0].startswith("kv_dtype: must be one of") and "got 'nvfp4'" in msgs[0]


def test_a_space_refuses_an_nvfp4_kv_cache_where_it_is_written(tmp_path: Path) -> None:
    text = (REPO / "examples" / "b200_vs_h100.yaml").read_text()
    bad = text.replace("  vocab_size: 128256\n", "  vocab_size: 128256\n  kv_dtype: nvfp4\n")
    assert bad != text
    (tmp_path / "s.yaml").write_text(bad)
    with pytest.raises(
        ConfigError, match=r"s\.yaml:\d+: space\.kv_dtype: must be one of .*weight dtype"
    ):
        load_space(tmp_path / "s.yaml")


def test_only_gpus_with_fp4_tensor_cores_run_nvfp4() -> None:
    """B200 has FP4 tensor cores (a `peak_fp4_flops_per_s`); Hopper and Ampere do not: there an
    nvfp4 configuration is invalid with a reason naming the GPU and where nvfp4 runs."""
    fp4 = fp4_gpu_names()
    assert "b200_sxm" in fp4
    assert not {"h100_sxm", "h200_sxm", "a100_sxm", "gh200"} & set(fp4)
    assert all(get_gpu(g).peak_fp4_flops_per_s for g in fp4)
    gpus = ["h100_sxm", "b200_sxm", "a100_sxm"]
    dtypes = ["bfloat16", "fp8", "nvfp4"]
    cols, n = C.as_columns(_rows(gpus, dtypes))
    d = C.derived(cols, n)
    for i in range(n):
        gpu, dt = cols["gpu"][i], cols["weight_dtype"][i]
        if dt == "nvfp4" and gpu != "b200_sxm":
            assert d["invalid"][i] == (
                f"weight_dtype: nvfp4 needs FP4 tensor cores, which {gpu} lacks (Blackwell and "
                f"later: {', '.join(fp4)}), got 'nvfp4'"
            )
        else:
            assert d["invalid"][i] == "", (gpu, dt, d["invalid"][i])
    # the rule alone, vectorised, agrees; a broken architecture rule still comes first
    msg = R.check_weight_dtype_on_gpu(cols["weight_dtype"], cols["gpu"], cols["gpu"] == "b200_sxm")
    np.testing.assert_array_equal(msg != "", d["invalid"] != "")
    rows = _rows(["h100_sxm"], ["nvfp4"])
    rows["n_kv_heads"] = [5]
    cols, n = C.as_columns(rows)
    assert C.derived(cols, n)["invalid"][0] == "n_kv_heads: must divide n_heads=32, got 5"


def test_the_b200_vs_h100_example_counts_h100_nvfp4_rows_invalid_with_the_reason() -> None:
    space = load_space(REPO / "examples" / "b200_vs_h100.yaml")
    cols = space.enumerate()
    assert set(cols["gpu"]) == {"h100_sxm", "b200_sxm"}
    assert set(cols["weight_dtype"]) == {"bfloat16", "fp8", "nvfp4"}
    count = count_feasible(space)
    h100_nvfp4 = int(((cols["gpu"] == "h100_sxm") & (cols["weight_dtype"] == "nvfp4")).sum())
    assert h100_nvfp4 == space.size() // 6
    assert count.invalid == {
        "weight_dtype: nvfp4 needs FP4 tensor cores, which h100_sxm lacks (Blackwell and later: "
        f"{', '.join(fp4_gpu_names())}), got 'nvfp4'": h100_nvfp4
    }
    assert count.feasible and count.feasible > space.size() // 2


def test_every_example_space_loads_and_has_feasible_configurations() -> None:
    """The spaces of examples/ (run by path; docs/search_spaces.md): each loads, its
    configurations are judged, and some are feasible (search_spaces/ has its own test)."""
    files = sorted((REPO / "examples").glob("*.yaml"))
    assert "b200_vs_h100.yaml" in {p.name for p in files}
    for path in files:
        space = load_space(path)
        count = count_feasible(space)
        assert count.feasible and count.feasible > 0, path.name
        assert set(np.unique(space.enumerate()["gpu"])) <= set(gpu_names()), path.name


def test_hf_import_reads_nvfp4_checkpoints_and_export_writes_bfloat16(tmp_path: Path) -> None:
    """An NVIDIA ModelOpt NVFP4 checkpoint (quant_algo NVFP4) and an llm-compressor one (format
    nvfp4-pack-quantized) import as nvfp4 weights with a 16-bit KV cache; export carries
    bfloat16 (nvfp4 is no torch dtype)."""
    base = to_hf_config(lookup_model("Llama-3-8B"))
    for q in (
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
        {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"},
    ):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, "torch_dtype": "bfloat16", "quantization_config": q}))
        a = import_hf_config(path).arch
        assert (a.weight_dtype, a.kv_dtype) == ("nvfp4", "bfloat16"), q
        out = to_hf_config(a)
        assert out.get("torch_dtype", out.get("dtype")) == "bfloat16"
