"""The memory rule (`dse.spec.arch.memory_breakdown` / `fits_memory`) against what engines allocate
and what argonne actually ran (issue 18: 55 of argonne's configurations were refused before)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.spec import arch as A
from dse.spec import columns as C
from dse.spec.arch import Architecture
from dse.spec.catalogue import lookup_model
from dse.spec.hardware import get_gpu

GIB = 2**30


def _argonne_configs(data_dir: Path):  # pandas frames: (configurations, rows kept)
    import pandas as pd

    from dse.data._argonne import read_argonne
    from dse.fitting.e2e_rows import e2e_configs

    tables = read_argonne(data_dir)
    if not tables:
        pytest.skip("no argonne tables in the data folder")
    rows = pd.concat(list(tables.values()), ignore_index=True)
    keys = ["gpu", "engine", "model", "batch_size", "input_tokens", "output_tokens", "n_gpus"]
    rows = rows.drop_duplicates(subset=keys)
    registered = [g for g in rows["gpu"].unique() if g in {"h100_sxm", "a100_sxm_40gb", "gh200"}]
    return e2e_configs(rows[rows["gpu"].isin(registered)].reset_index(drop=True))


def test_every_configuration_argonne_ran_is_accepted(data_dir: Path) -> None:
    cfg, kept = _argonne_configs(data_dir)
    assert len(cfg) > 500  # the catalogued models on H100, A100-40GB and GH200
    d = C.derived(*C.as_columns(cfg), messages=True)
    refused = kept[~d["fits_memory"]]
    assert refused.empty, refused[["gpu", "model", "batch_size", "input_tokens", "n_gpus"]]
    assert (d["memory_refusal"] == "").all()
    # ... but the runs whose whole batch cannot be resident at once (Llama-2-7B's MHA cache of
    # 64 x 4096 tokens on one 40 GB A100: 128 GiB) are warned about, as the engine preempted.
    queued = d["memory_margin"] < 0
    assert queued.any()
    assert all("queues or preempts" in w for w in d["memory_warning"][queued])


def test_weights_beyond_hbm_are_refused() -> None:
    a = lookup_model("Llama-3-70B")  # 141 GB of bf16 weights
    for gpu, tp in (("h100_sxm", 1), ("a100_sxm_40gb", 2)):
        cap = get_gpu(gpu).hbm_capacity_bytes
        mem = A.memory_breakdown(a, 1, 128, 16, tp)
        assert mem["weights"] > cap
        assert not A.fits_memory(mem["required"], cap)
        refuse, warn = A.memory_messages(mem, cap, gpu)
        assert "does not fit in memory" in refuse[0] and gpu in refuse[0]
        assert warn[0] == ""
    # Through the configuration columns as `dse predict` sees them.
    cols, n = C.as_columns({**a.to_dict(), "gpu": "h100_sxm", "tensor_parallel": 1})
    d = C.derived(cols, n, messages=True)
    assert not d["fits_memory"][0] and d["memory_refusal"][0].startswith("does not fit")
    # Sharded over 2 H100s the same model runs.
    cols, n = C.as_columns({**a.to_dict(), "gpu": "h100_sxm", "tensor_parallel": 2})
    assert C.derived(cols, n)["fits_memory"][0]


def test_kv_cache_is_the_closed_form_at_block_granularity() -> None:
    rng = np.random.default_rng(18)
    n = 200
    heads = rng.choice([8, 16, 32, 64], n)
    cols = {
        "d_model": heads * 128,
        "n_layers": rng.integers(1, 81, n),
        "n_heads": heads,
        "n_kv_heads": np.minimum(rng.choice([1, 2, 4, 8], n), heads),
        "d_ff": rng.integers(16, 400, n) * 64,
        "kv_dtype": rng.choice(["bfloat16", "fp8"], n),
    }
    a = Architecture.from_columns(cols, n)
    batch, prompt, out = rng.integers(1, 257, n), rng.integers(1, 8193, n), rng.integers(1, 2049, n)
    tp = rng.choice([1, 2, 4, 8, 16], n)
    engine = rng.choice(["vllm", "trtllm"], n)
    mem = A.memory_breakdown(a, batch, prompt, out, tp, engine)
    block = np.where(engine == "vllm", 16, 32)
    held = np.ceil((prompt + out) / block) * block  # whole blocks per sequence
    kv_heads = np.maximum(cols["n_kv_heads"] // tp, 1)  # one replica below a head per GPU
    per_token = 2 * cols["n_layers"] * kv_heads * 128 * np.where(cols["kv_dtype"] == "fp8", 1, 2)
    np.testing.assert_array_equal(mem["kv_cache_one"], held * per_token)
    np.testing.assert_array_equal(mem["kv_cache"], batch * held * per_token)
    # Blocks, not max context: 1000 + 24 tokens fill exactly 64 vLLM blocks; one more needs 65.
    llama = lookup_model("Llama-3-8B")  # 128 KiB of bf16 KV per token
    assert A.memory_breakdown(llama, 1, 1000, 24)["kv_cache"] == 1024 * 131_072
    assert A.memory_breakdown(llama, 1, 1000, 25)["kv_cache"] == 1040 * 131_072
    assert A.memory_breakdown(llama, 1, 1000, 25, engine="trtllm")["kv_cache"] == 1056 * 131_072


def test_parts_add_up_and_activations_are_one_layer() -> None:
    a = lookup_model("Llama-3-8B")
    m = A.memory_breakdown(a, 8, 1024, 256, 1)
    assert m["total"] == pytest.approx(
        m["weights"] + m["kv_cache"] + m["activations"] + m["reserved"], rel=1e-12
    )
    assert m["required"] == pytest.approx(m["total"] - m["kv_cache"] + m["kv_cache_one"], rel=1e-12)
    assert m["reserved"] == A.RESERVED_BYTES
    # Activations are one layer's at a time: the layer count does not change them.
    deep = A.memory_breakdown(Architecture(**{**a.to_dict(), "n_layers": 64}), 8, 1024, 256, 1)
    assert deep["activations"] == m["activations"]
    # The largest step is at most max(prompt + output, 2048) tokens, however large the batch:
    # from 8 to 256 sequences only the step's fp32 logits grow (one row per sequence).
    big = A.memory_breakdown(a, 256, 1024, 256, 1)
    assert big["activations"] - m["activations"] == 4 * (256 - 8) * a.vocab_size
    assert big["activations"] < 1 * GIB


def test_a_configuration_near_the_limit_is_warned() -> None:
    a = lookup_model("Llama-3-8B")
    cap = get_gpu("h100_sxm").hbm_capacity_bytes
    batch = np.arange(1, 600)
    mem = A.memory_breakdown(a, batch, 1024, 1024, 1)
    margin = A.memory_margin(mem, cap)
    refuse, warn = A.memory_messages(mem, cap, "h100_sxm")
    assert (refuse == "").all()  # one sequence always fits
    near = (margin >= 0) & (margin < A.MEMORY_WARN_MARGIN)
    assert near.any() and (margin < 0).any() and (margin > 0.5).any()
    assert all("within" in w for w in warn[near])
    assert all("queues or preempts" in w for w in warn[margin < 0])
    assert (warn[margin >= A.MEMORY_WARN_MARGIN] == "").all()
