"""Golden predictions of the frozen predictor (issue 23): every output of `dse.predict.predict`
for 2,560 configurations (5 GPUs x 2 engines x {dense, MoE} x TP {1, 2, 4, 8}, 32 each: half
published models from the catalogue, half random shapes) plus 160 roofline-only ones.

    PYTHONPATH=. python tests/predict/test_golden_predictions.py     # (re)writes tests/data/golden_predictions.npz

Rewrite the file only in a commit that means to move predictions (a new artifact), and say so.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden_predictions.npz"
GPUS = ("h100_sxm", "h200_sxm", "a100_sxm", "a100_sxm_40gb", "gh200")
ENGINES = ("vllm", "trtllm")
TPS = (1, 2, 4, 8)
PER_CELL = 32
# Totals, bands and the out-of-range degree are stored in float64 and compared at RTOL; the
# itemised columns (breakdown.*, blocks.*) in float32 (6e-8 resolution), also at RTOL.
TOTALS = (
    "ttft_s",
    "tpot_s",
    "latency_s",
    "prefill_energy_j",
    "decode_energy_j",
    "energy_j",
    "energy_per_output_token_j",
    "avg_power_w",
    "ttft_lo_s",
    "ttft_hi_s",
    "tpot_lo_s",
    "tpot_hi_s",
    "latency_lo_s",
    "latency_hi_s",
    "energy_lo_j",
    "energy_hi_j",
    "out_of_range_degree",
)
# Across CPUs OpenBLAS kernel choice in the float32 MLPs moves outputs ~1e-7; DSE_GOLDEN_RTOL=1e-12
# checks a pure move bit-close on the machine that wrote the file.
RTOL = float(os.environ.get("DSE_GOLDEN_RTOL", 1e-6))
ATOL = 1e-15  # outputs that are exactly 0 (operators a configuration does not run)
# The values in out_of_range_inputs ("level3: prompt 7670 > 2048 (x3.75)") are compared through
# out_of_range_degree; the text keeps the names ("level3: prompt > 2048").
_VALUES = re.compile(r" \S+ [<>] \S+ \(x[^)]*\)")


GOLDEN_MODELS = frozenset(
    [
        "LLaMA-7B",
        "LLaMA-13B",
        "LLaMA-30B",
        "LLaMA-65B",
        "Llama-2-7B",
        "Llama-2-13B",
        "Llama-2-70B",
        "Llama-3-8B",
        "Llama-3-70B",
        "Llama-3.1-8B",
        "Llama-3.1-70B",
        "Llama-3.1-405B",
        "Llama-3.2-1B",
        "Llama-3.2-3B",
        "Llama-3.3-70B",
        "CodeLlama-7B",
        "CodeLlama-13B",
        "CodeLlama-34B",
        "CodeLlama-70B",
        "Mistral-7B-v0.1",
        "Mistral-7B-v0.2",
        "Mistral-7B-v0.3",
        "Mistral-Nemo-12B",
        "Mistral-Small-24B",
        "Mistral-Large-2407",
        "Mixtral-8x7B",
        "Mixtral-8x22B",
        "Mixtral-8x22B-Instruct-v0.1",
        "Qwen-72B",
        "Qwen1.5-7B",
        "Qwen1.5-MoE-A2.7B",
        "Qwen2-7B",
        "Qwen2-72B",
        "Qwen2-57B-A14B",
        "Qwen2.5-7B",
        "Qwen2.5-14B",
        "Qwen2.5-32B",
        "Qwen2.5-72B",
        "Qwen3-8B",
        "Qwen3-32B",
        "Qwen3-30B-A3B",
        "Qwen3-235B-A22B",
        "Gemma-2B",
        "Gemma-7B",
        "CodeGemma-2B",
        "CodeGemma-7B",
        "Gemma-2-2B",
        "Gemma-2-9B",
        "Gemma-2-27B",
        "Phi-2",
        "Phi-3-mini",
        "Phi-3-small",
        "Phi-3-medium",
        "StarCoder2-3B",
        "StarCoder2-7B",
        "StarCoder2-15B",
        "Falcon-7B",
        "Falcon-40B",
        "Falcon-180B",
        "BLOOM-176B",
        "BLOOM-7B1",
        "OPT-6.7B",
        "GPT-J-6B",
        "Aquila-7B",
        "InternLM-20B",
    ]
)
FULL_ATTENTION = {"attention_pattern": "full", "sliding_window": 0, "rope": True}


def golden_configs(seed: int = 23) -> dict[str, np.ndarray]:
    from dse.spec.catalogue import lookup_model, model_names  # dse.spec.catalogue after the move

    rng = np.random.default_rng(seed)
    # The catalogue as it was when the file was written, every layer full attention (issue 21
    # added models and gave Mistral-7B-v0.1, Gemma-2, Phi-3 and StarCoder2 their sliding
    # windows, and the `rope` field): the same configurations, whatever the catalogue holds now.
    names = [m for m in model_names() if m in GOLDEN_MODELS]
    assert len(names) == len(GOLDEN_MODELS), "a golden model left the catalogue"
    cards = {m: {**lookup_model(m).to_dict(), **FULL_ATTENTION} for m in names}
    dense = [m for m, a in cards.items() if a["n_experts"] == 1]
    moe_models = [m for m, a in cards.items() if a["n_experts"] > 1]
    rows: list[dict] = []
    for gpu in GPUS:
        hopper = gpu in ("h100_sxm", "h200_sxm", "gh200")
        for engine in ENGINES:
            for moe in (False, True):
                for tp in TPS:
                    for j in range(PER_CELL):
                        if j % 2 == 0:  # a published model
                            a = dict(cards[str(rng.choice(moe_models if moe else dense))])
                        else:  # a random shape
                            heads = int(rng.choice([16, 32, 64]))
                            a = {
                                "d_model": int(rng.choice([2048, 3072, 4096, 5120, 8192])),
                                "n_layers": int(rng.choice(np.arange(8, 81, 4))),
                                "n_heads": heads,
                                "n_kv_heads": min(int(rng.choice([1, 2, 4, 8, 16])), heads),
                                "head_dim": 128,
                                "d_ff": int(rng.integers(32, 448)) * 64,
                                "vocab_size": int(rng.choice([32000, 128256, 151936])),
                                "n_experts": int(rng.choice([8, 16, 64])) if moe else 1,
                                "top_k": int(rng.choice([1, 2, 4])) if moe else 1,
                                "d_ff_expert": int(rng.choice([1408, 4096, 14336])),
                                "gated_mlp": bool(rng.random() < 0.85),
                                "qk_norm": bool(rng.random() < 0.1),
                            }
                        fp8 = hopper and rng.random() < 0.25  # the A100s have no fp8 kernels
                        a.update(
                            weight_dtype="fp8" if fp8 else "bfloat16",
                            kv_dtype="fp8" if fp8 and rng.random() < 0.5 else "bfloat16",
                            batch_size=int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256])),
                            prompt_tokens=int(rng.choice([16, 128, 512, 1024, 2048, 4096, 8192])),
                            output_tokens=int(rng.choice([1, 2, 16, 128, 256, 1024, 2048])),
                            tensor_parallel=tp,
                            engine=engine,
                            gpu=gpu,
                        )
                        rows.append(a)
    keys = sorted({k for r in rows for k in r})
    from dse.spec.columns import DEFAULTS  # dse.spec.columns after the move

    return {k: np.array([r.get(k, DEFAULTS.get(k)) for r in rows]) for k in keys}


def _pack(out: dict[str, np.ndarray], prefix: str = "") -> dict[str, np.ndarray]:
    g: dict[str, np.ndarray] = {}
    for k, v in out.items():
        a = np.asarray(v)
        if k in TOTALS:
            g[prefix + k] = a.astype(np.float64)
        elif a.dtype.kind == "f":
            g[prefix + k] = a.astype(np.float32)
        elif a.dtype.kind == "b":
            g[prefix + k] = a
        else:  # provenance text: distinct values + one code per configuration
            s = a.astype(str)
            if k == "out_of_range_inputs":
                s = np.array([_VALUES.sub("", x) for x in s])
            u, c = np.unique(s, return_inverse=True)
            g[f"{prefix}{k}@values"], g[f"{prefix}{k}@codes"] = u, c.astype(np.int16)
    return g


def golden_outputs() -> dict[str, np.ndarray]:
    from dse.predict import predict  # dse.predict after the move

    cfg = golden_configs()
    out = _pack(predict(cfg))
    # The roofline path (no artifact): the first 32 configurations of each GPU.
    first = np.concatenate([np.flatnonzero(cfg["gpu"] == g)[:PER_CELL] for g in GPUS])
    sub = {k: v[first] for k, v in cfg.items()}
    out.update(_pack(predict(sub, artifacts={g: None for g in GPUS}), "roofline/"))
    return out


@pytest.mark.slow
def test_predictions_match_the_golden_file() -> None:
    if not GOLDEN.is_file():
        pytest.skip(f"{GOLDEN} not found")
    gold = np.load(GOLDEN)
    now = golden_outputs()
    assert sorted(now) == sorted(gold.files), "output keys changed"
    for k in gold.files:
        if gold[k].dtype.kind in "fc":
            np.testing.assert_allclose(
                now[k].astype(gold[k].dtype), gold[k], rtol=RTOL, atol=ATOL, err_msg=k
            )
        else:
            np.testing.assert_array_equal(now[k], gold[k], err_msg=k)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    GOLDEN.parent.mkdir(exist_ok=True)
    outs = golden_outputs()
    np.savez_compressed(GOLDEN, **outs)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size:,} bytes, {len(outs)} arrays)")
