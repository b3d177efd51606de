"""The inference workload: a static batch of requests, prefill then decode."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from dse.spec.choices import (  # noqa: F401  (re-exported)
    BATCHING,
    DEFAULT_ENGINE_VERSION,
    ENGINES,
    ROUTINGS,
)


@dataclass(frozen=True)
class Workload:
    """A static batch: `batch_size` requests of `prompt_tokens` in, `output_tokens` out.

    `tensor_parallel` GPUs share every layer (Megatron-style sharding); `engine` selects the
    serving framework whose overheads the end-to-end level learned (vLLM by default, the most
    common in the measurements). `batching` "continuous" prices a serving run whose running
    batch averages `batch_size` sequences (docs/accuracy.md "Serving energy") with the host
    constants of `engine_version` (the engine's version; read by continuous batching only).
    `routing` says how the batch's tokens pick MoE experts (read by MoE layers only): uniform
    (independent tokens), round_robin (deterministic, balanced) or identical (copies of one
    sequence, as argonne's TensorRT-LLM benchmarks run).
    """

    batch_size: int = 1
    prompt_tokens: int = 1024
    output_tokens: int = 256
    tensor_parallel: int = 1
    engine: str = "vllm"
    # static by default: the batches Level 3 was fitted on, and every prediction made before
    # `batching` existed ("continuous": dse.models.serving)
    batching: str = "static"
    # the newest version whose host constants are fitted (dse.spec.choices)
    engine_version: str = DEFAULT_ENGINE_VERSION
    # how the batch's tokens pick MoE experts (dse.spec.choices.ROUTINGS); uniform: every
    # prediction made before `routing` existed
    routing: str = "uniform"

    def validate(self, where: str = "workload") -> Workload:
        """Raise ConfigError with the rule and the value when the workload is impossible.

        The rules are the field table's (`dse.spec.fields`): `<where>.<field>: <rule>, got <value>`.
        """
        from dse.spec.fields import check

        values = {}
        for f in fields(self):
            values[f.name] = check(f.name, getattr(self, f.name), f"{where}.{f.name}")
        return replace(self, **values)
