"""The PyTorch kernels a profile times, one builder per measurement table.

Each builder allocates its operands on the device and returns a `Kernel`: the call to time and
the name of the kernel library that ran (the `kernel_source` column). Definitions follow the
tables `dse fit` reads (docs/data.md): GEMM y = x[m, k] @ W[n, k]^T; prefill attention =
`batch_size` causal sequences of `isl` tokens; decode attention = one new token per sequence
over `kv_len` cached keys + its own; MoE = routing-given grouped expert GEMMs (gate+up, SiLU,
down, weighted scatter-add); layer ops = RMSNorm, RoPE, SiLU-and-mul and residual add over
tokens x width (vidur's op names); all-reduce = `torch.distributed.all_reduce` (NCCL).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dse.errors import ConfigError

FP8 = ("fp8",)


class Unsupported(Exception):
    """This device cannot run this shape or dtype (recorded and skipped, not fatal)."""


@dataclass
class Kernel:
    fn: Callable[[], Any]
    kernel_source: str


def torch_dtype(torch: Any, name: str) -> Any:
    table = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if name in table:
        return table[name]
    if name == "fp8":
        return torch.float8_e4m3fn
    raise ConfigError(f"unknown dtype {name!r}; valid: bfloat16, float16, float32, fp8")


def gemm(torch: Any, device: Any, dtype: str, m: int, n: int, k: int) -> Kernel:
    if dtype in FP8:
        # per-tensor scaled fp8 (torch._scaled_mm, cuBLASLt): needs sm89+ tensor cores
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
            raise Unsupported("fp8 GEMM needs a CUDA GPU of compute capability >= 8.9")
        if m % 16 or n % 16 or k % 16:
            raise Unsupported("fp8 GEMM (torch._scaled_mm) needs m, n and k multiples of 16")
        f8 = torch.float8_e4m3fn
        x = torch.randn(m, k, device=device).to(f8)
        w = torch.randn(n, k, device=device).to(f8)
        one = torch.ones((), device=device)

        def run_fp8() -> Any:
            return torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        run_fp8()
        return Kernel(run_fp8, "torch_scaled_mm")
    dt = torch_dtype(torch, dtype)
    x = torch.randn(m, k, device=device, dtype=dt)
    w = torch.randn(n, k, device=device, dtype=dt)
    lin = torch.nn.functional.linear
    return Kernel(lambda: lin(x, w), "torch_linear")


def _sdpa_backend(torch: Any, device: Any, call: Callable[[], Any]) -> str:
    """The first SDPA backend that runs this call (flash, memory-efficient, cuDNN, math), pinned
    with `sdpa_kernel` so the backend timed is the one recorded."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if device.type == "cuda":
        order.append(SDPBackend.CUDNN_ATTENTION)
    order.append(SDPBackend.MATH)
    for backend in order:
        try:
            with sdpa_kernel([backend]):
                call()
            return str(backend.name).lower()
        except RuntimeError:
            continue
    raise Unsupported("no SDPA backend runs this shape")


def _attention(
    torch: Any, device: Any, dtype: str, q_shape: tuple, kv_shape: tuple, causal: bool
) -> Kernel:
    if dtype in FP8:
        raise Unsupported("attention is timed in bfloat16/float16 only (SDPA has no fp8 path)")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dt = torch_dtype(torch, dtype)
    q = torch.randn(*q_shape, device=device, dtype=dt)
    k = torch.randn(*kv_shape, device=device, dtype=dt)
    v = torch.randn(*kv_shape, device=device, dtype=dt)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    gqa = q_shape[1] != kv_shape[1]

    def call() -> Any:
        return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)

    name = _sdpa_backend(torch, device, call)
    backend = getattr(SDPBackend, name.upper())

    def run() -> Any:
        with sdpa_kernel([backend]):
            return call()

    return Kernel(run, f"sdpa_{name}")


def context_attention(
    torch: Any,
    device: Any,
    dtype: str,
    batch_size: int,
    isl: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
) -> Kernel:
    return _attention(
        torch,
        device,
        dtype,
        (batch_size, num_heads, isl, head_dim),
        (batch_size, num_kv_heads, isl, head_dim),
        causal=True,
    )


def generation_attention(
    torch: Any,
    device: Any,
    dtype: str,
    batch_size: int,
    kv_len: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
) -> Kernel:
    # the new token attends to the kv_len cached keys and its own (the readers' convention)
    return _attention(
        torch,
        device,
        dtype,
        (batch_size, num_heads, 1, head_dim),
        (batch_size, num_kv_heads, kv_len + 1, head_dim),
        causal=False,
    )


def route(
    torch: Any, tokens: int, topk: int, experts: int, distribution: str, seed: int = 0
) -> Any:
    """Expert index of every (token, slot), shape (tokens, topk), by the stated routing.

    balanced: round robin, pair i -> expert i mod E (min(E, T k) experts touched; a token's k
    slots are k distinct experts when k <= E); uniform: each slot drawn uniformly; power_law_a:
    expert e with probability proportional to (e + 1)^-a. Drawn slots of one token are distinct
    (sampling without replacement), seeded so reruns route alike."""
    if distribution == "balanced":
        return (torch.arange(tokens * topk) % experts).reshape(tokens, topk)
    gen = torch.Generator().manual_seed(seed)
    if distribution == "uniform":
        p = torch.ones(experts)
    elif distribution.startswith("power_law_"):
        a = float(distribution.removeprefix("power_law_"))
        p = (torch.arange(experts, dtype=torch.float64) + 1.0) ** -a
    else:
        raise ConfigError(f"unknown MoE routing {distribution!r}")
    return torch.multinomial(
        p.float().expand(tokens, experts), topk, replacement=False, generator=gen
    )


def moe(
    torch: Any,
    device: Any,
    dtype: str,
    num_tokens: int,
    hidden_size: int,
    inter_size: int,
    topk: int,
    num_experts: int,
    distribution: str,
) -> Kernel:
    if dtype in FP8:
        raise Unsupported("MoE is timed in bfloat16/float16 only")
    dt = torch_dtype(torch, dtype)
    x = torch.randn(num_tokens, hidden_size, device=device, dtype=dt)
    w1 = torch.randn(num_experts, 2 * inter_size, hidden_size, device=device, dtype=dt) * 0.02
    w2 = torch.randn(num_experts, hidden_size, inter_size, device=device, dtype=dt) * 0.02
    idx = route(torch, num_tokens, topk, num_experts, distribution).to(device)
    gate_w = torch.softmax(torch.randn(num_tokens, topk, device=device), dim=-1).to(dt)
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts).tolist()  # routing fixed per shape
    token_of = order // topk
    weight_of = gate_w.reshape(-1)[order].unsqueeze(1)
    lin = torch.nn.functional.linear
    silu = torch.nn.functional.silu
    # (expert, slice of the sorted pairs) for the experts the routing touches
    spans = []
    start = 0
    for e, c in enumerate(counts):
        if c:
            spans.append((e, start, start + c))
        start += c

    def run() -> Any:
        xs = x.index_select(0, token_of)
        out = torch.zeros_like(x)
        for e, a, b in spans:
            h = lin(xs[a:b], w1[e])
            g, u = h.chunk(2, dim=-1)
            y = lin(silu(g) * u, w2[e]) * weight_of[a:b]
            out.index_add_(0, token_of[a:b], y)
        return out

    return Kernel(run, "torch_grouped_expert_loop")


LAYER_OPS: tuple[str, ...] = (
    "input_layernorm",
    "attn_rope",
    "mlp_act",
    "add",
    "post_attention_layernorm",
)


def layer_ops(
    torch: Any,
    device: Any,
    dtype: str,
    num_tokens: int,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    d_ff: int,
) -> dict[str, Kernel]:
    """One kernel per vidur layer op at this model shape (tensor parallel 1)."""
    dt = torch_dtype(torch, dtype)
    t = num_tokens
    hd = d_model // n_heads
    x = torch.randn(t, d_model, device=device, dtype=dt)
    r = torch.randn(t, d_model, device=device, dtype=dt)
    w = torch.ones(d_model, device=device, dtype=dt)
    eps = 1e-6
    rms = torch.nn.functional.rms_norm
    gu = torch.randn(t, 2 * d_ff, device=device, dtype=dt)
    silu = torch.nn.functional.silu
    q = torch.randn(t, n_heads, hd, device=device, dtype=dt)
    k = torch.randn(t, n_kv_heads, hd, device=device, dtype=dt)
    pos = torch.arange(t, device=device, dtype=torch.float32)
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))
    ang = torch.outer(pos, inv)
    cos, sin = ang.cos().to(dt)[:, None, :], ang.sin().to(dt)[:, None, :]

    def rope(z: Any) -> Any:  # rotate-half RoPE (Llama / GPT-NeoX layout)
        z1, z2 = z[..., : hd // 2], z[..., hd // 2 :]
        return torch.cat((z1 * cos - z2 * sin, z2 * cos + z1 * sin), dim=-1)

    def act() -> Any:
        g, u = gu.chunk(2, dim=-1)
        return silu(g) * u

    # the layer's projection GEMMs as vidur times them (fused QKV, O, fused gate+up, down)
    lin = torch.nn.functional.linear
    qkv_w = torch.randn((n_heads + 2 * n_kv_heads) * hd, d_model, device=device, dtype=dt)
    o_w = torch.randn(d_model, n_heads * hd, device=device, dtype=dt)
    up_w = torch.randn(2 * d_ff, d_model, device=device, dtype=dt)
    down_w = torch.randn(d_model, d_ff, device=device, dtype=dt)
    attn_out = torch.randn(t, n_heads * hd, device=device, dtype=dt)
    h_ff = torch.randn(t, d_ff, device=device, dtype=dt)

    return {
        "input_layernorm": Kernel(lambda: rms(x, (d_model,), w, eps), "torch_rms_norm"),
        "post_attention_layernorm": Kernel(lambda: rms(r, (d_model,), w, eps), "torch_rms_norm"),
        "attn_rope": Kernel(lambda: (rope(q), rope(k)), "torch_eager_rope"),
        "mlp_act": Kernel(act, "torch_silu_and_mul"),
        "add": Kernel(lambda: x + r, "torch_add"),
        "attn_pre_proj": Kernel(lambda: lin(x, qkv_w), "torch_linear"),
        "attn_post_proj": Kernel(lambda: lin(attn_out, o_w), "torch_linear"),
        "mlp_up_proj": Kernel(lambda: lin(x, up_w), "torch_linear"),
        "mlp_down_proj": Kernel(lambda: lin(h_ff, down_w), "torch_linear"),
    }


def l2_bytes(torch: Any, device: Any) -> int:
    """The cache a flush must evict: the GPU's L2, or the CPU's last-level cache (sysfs;
    32 MiB where it cannot be read)."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    for index in (3, 2):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size") as fh:
                text = fh.read().strip().upper()
            mult = {"K": 1024, "M": 1024**2}.get(text[-1], 1)
            return int(text.rstrip("KM")) * mult
        except (OSError, ValueError):
            continue
    return 32 * 1024**2


def peak_sizes(device: Any) -> tuple[int, int]:
    """(square GEMM size, copy elements) used to measure the peak FLOP rate and bandwidth."""
    return (8192, 2**28) if device.type == "cuda" else (1024, 2**24)
