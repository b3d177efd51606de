"""The closed lists a field's value is chosen from, written once (issue 23): storage dtypes
(with their bytes per element), norms, serving engines. Pure data at the bottom of the import
graph: `dse.spec.fields` checks values against these, `dse.spec.arch` and `dse.spec.workload` re-export them,
and nothing here imports the rest of dse. (The GPU names are the registry's, `dse.spec.hardware`.)
"""

from __future__ import annotations

# Bytes per element of each storage dtype. fp8 halves bf16's 16 bits; nvfp4 (Blackwell's
# block-scaled 4-bit float) stores 4-bit e2m1 values plus one fp8 (e4m3) scale per 16 elements:
# 4 + 8 / 16 = 4.5 bits = 0.5625 bytes (`dse.models.gemm.IN_BYTES` reads its GEMMs the same way).
DTYPE_BYTES: dict[str, float] = {
    "float32": 4.0,
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "nvfp4": 0.5625,
}
# The values of `weight_dtype`: every storage dtype.
WEIGHT_DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
# Weight dtypes whose GEMMs run on FP4 tensor cores only (Blackwell and later: a GPU spec with
# `peak_fp4_flops_per_s`); on an earlier GPU the configuration is invalid (`dse.spec.rules.
# check_weight_dtype_on_gpu`): no FP4 MMA there, and no GEMM table measured them (docs/
# architecture.md "Weight and KV dtypes": `int4` is the nearest value priced there).
FP4_WEIGHT_DTYPES: tuple[str, ...] = ("nvfp4",)
# The values of `kv_dtype`: what the engines store a KV cache in (bf16 / fp16, fp8, ...). nvfp4
# is a weight (and GEMM input) format only: no engine the predictor knows keeps its cache in it.
KV_DTYPES: tuple[str, ...] = tuple(d for d in DTYPE_BYTES if d not in FP4_WEIGHT_DTYPES)
NORMS: tuple[str, ...] = ("rmsnorm", "layernorm")
# The serving engines the end-to-end level knows: the one list the CLI flags (`--engine`), search
# spaces (`workload.engine`) and batch CSVs are checked against (through `dse.spec.fields`).
ENGINES: tuple[str, ...] = ("vllm", "trtllm", "sglang")
# How the engine batches requests (`workload.batching`): "static" is one batch run to the end,
# as every measurement Level 3 was fitted on; "continuous" adds the engine's host time per decode
# step and the GPU's waiting power (`dse.models.serving`, docs/accuracy.md "Serving energy").
BATCHING: tuple[str, ...] = ("static", "continuous")
# How a batch's tokens pick their MoE experts (`workload.routing`; `dse.predict.ops._moe_ops`):
# "uniform" (the default): independent tokens, each drawing top_k of n_experts uniformly;
# "round_robin": aiconfigurator's deterministic "balanced" routing, min(n_experts, T top_k)
# experts touched; "identical": every sequence of the batch is a copy of one (argonne's
# TensorRT-LLM runs: one prompt, greedy decoding), so a decode step touches top_k experts.
ROUTINGS: tuple[str, ...] = ("uniform", "round_robin", "identical")
# The engine's version (`workload.engine_version`), read by continuous batching only: its host
# constants are fitted per version (dse/predict/serving_constants.json). The default is the
# newest version fitted (vLLM 0.11.1, ml-energy v3); tests/models/test_serving.py checks that the
# JSON's newest version is this one. Any version text is accepted; one not fitted is priced
# with the nearest fitted version's constants and flagged out of range.
DEFAULT_ENGINE_VERSION = "0.11.1"
# Linear-attention / state-space layer families (`attention_pattern` kind "linear"): Gated
# DeltaNet (Qwen3-Next), Mamba-2 (Bamba, Nemotron-H, Falcon-H1) and Mamba-1 (Jamba); they
# differ in parameters and in the layout of their state (docs/architecture.md).
LINEAR_KINDS: tuple[str, ...] = ("gated_deltanet", "mamba2", "mamba1")
