"""Which attention kernel (backend) SGLang runs for a configuration, per GPU and phase: the rule
read off the measured tables (aiconfigurator's SGLang 0.5.14 attention tables, H100 and B200,
`kernel_source`), as a function of what a user's configuration gives (head_dim, query and KV
heads, query / KV-cache dtype, sliding window). Batch and length do not enter: no head
configuration of a table changes backend with them.

H100 (exact on every row): FlashAttention-3 ("fa3"), but Triton for head_dim > 256 (FA3's
largest) and for head_dim 256 with a sliding window.

B200 (exact on the rows the SGLang models fit, `dse.fitting.attention.default_backend_rows`:
where the table measured a shape under TRT-LLM MHA and again under FlashInfer or Triton, the
TRT-LLM MHA row, SGLang's default on Blackwell): TRT-LLM MHA ("trtllm_mha"), but
- Triton for head_dim 192 (every row of it);
- Triton for head_dim 256 with a non-power-of-two group of query heads per KV head below 8
  in decode (measured: (3, 1), (12, 2), (24, 4)), and in prefill only with one KV head and a
  group below 4 (measured: (3, 1); (12, 4) and (24, 8) ran TRT-LLM MHA); every other
  head_dim-256 group (powers of two to 128, 12, 24, 48, 96) ran TRT-LLM MHA. Unmeasured
  groups 5 and 7 are taken as their measured neighbours;
- prefill with a bf16 query over an fp8 KV cache: FlashInfer up to head_dim 128, Triton above
  (TRT-LLM MHA measured no such row).
Any other GPU, or engine, has no rule here (None): its models take no backend input.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# Per GPU: (the default backend, the other backends in one-hot column order)
SGLANG_BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "h100_sxm": ("fa3", ("triton",)),
    "b200_sxm": ("trtllm_mha", ("triton", "flashinfer")),
}
# head_dim FlashAttention-3 takes at most (hopper/: hdim 64-256)
FA3_MAX_HEAD_DIM = 256.0
# B200 head_dim 256: the query-head groups below which a non-power-of-two group ran Triton
# (measured: 3 in both phases, 6 in decode; 12 and above ran TRT-LLM MHA; prefill also needs
# one KV head)
B200_HD256_TRITON_GROUP_BELOW = {"context": 4.0, "generation": 8.0}


def _non_pow2(x: np.ndarray) -> np.ndarray:
    return np.log2(x) % 1.0 > 1e-9


def sglang_backend(gpu: str, phase: str, v: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Per row of inputs `v` (`AttentionModel._inputs`: head_dim, num_heads, num_kv_heads,
    window_size, kv_bytes, fp8), the backend SGLang runs on `gpu` in `phase` ("context" /
    "generation"), as strings; None where no rule is known for `gpu`."""
    if gpu not in SGLANG_BACKENDS:
        return None
    default, _ = SGLANG_BACKENDS[gpu]
    hd = np.asarray(v["head_dim"], dtype=np.float64)
    out = np.full(hd.shape, default, dtype=object)
    window = np.asarray(v["window_size"], dtype=np.float64) > 0
    if gpu == "h100_sxm":
        out[(hd > FA3_MAX_HEAD_DIM) | ((hd == FA3_MAX_HEAD_DIM) & window)] = "triton"
        return out
    group = np.asarray(v["num_heads"], np.float64) / np.asarray(v["num_kv_heads"], np.float64)
    odd_group = _non_pow2(group) & (group < B200_HD256_TRITON_GROUP_BELOW[phase])
    if phase == "context":
        odd_group &= np.asarray(v["num_kv_heads"], np.float64) == 1.0
    triton = (hd == 192.0) | ((hd == 256.0) & odd_group)
    if phase == "context":
        # bf16 query over an fp8 KV cache: a mixed-dtype prefill TRT-LLM MHA did not run
        mixed = (np.asarray(v["fp8"]) == 0) & (np.asarray(v["kv_bytes"]) < 2.0)
        out[mixed & (hd <= 128.0)] = "flashinfer"
        triton |= mixed & (hd > 128.0)
    out[triton] = "triton"
    return out


def backend_onehot(gpu: str, phase: str, v: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """One 0/1 column per non-default backend of `gpu` (`SGLANG_BACKENDS` order); [] without
    a rule."""
    names = sglang_backend(gpu, phase, v)
    if names is None:
        return []
    return [(names == b).astype(np.float64) for b in SGLANG_BACKENDS[gpu][1]]
