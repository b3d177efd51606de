"""The inference workload: a static batch of requests, prefill then decode."""

from __future__ import annotations

from dataclasses import dataclass

from dse.errors import ConfigError

ENGINES = ("vllm", "trtllm")


@dataclass(frozen=True)
class Workload:
    """A static batch: `batch_size` requests of `prompt_tokens` in, `output_tokens` out.

    `tensor_parallel` GPUs share every layer (Megatron-style sharding); `engine` selects the
    serving framework whose overheads the end-to-end level learned (vLLM by default, the most
    common in the measurements).
    """

    batch_size: int = 1
    prompt_tokens: int = 1024
    output_tokens: int = 256
    tensor_parallel: int = 1
    engine: str = "vllm"

    def validate(self) -> Workload:
        """Raise ConfigError with the rule and the value when the workload is impossible."""
        for name in ("batch_size", "prompt_tokens", "tensor_parallel"):
            v = getattr(self, name)
            if int(v) != v or v < 1:
                raise ConfigError(f"workload.{name}: must be an integer >= 1, got {v!r}")
        if int(self.output_tokens) != self.output_tokens or self.output_tokens < 1:
            raise ConfigError(
                f"workload.output_tokens: must be an integer >= 1, got {self.output_tokens!r}"
            )
        if self.tensor_parallel & (self.tensor_parallel - 1):
            raise ConfigError(
                f"workload.tensor_parallel: must be a power of two (1, 2, 4, 8), "
                f"got {self.tensor_parallel}"
            )
        if self.engine not in ENGINES:
            raise ConfigError(
                f"workload.engine: must be one of {', '.join(ENGINES)}, got {self.engine!r}"
            )
        return self
