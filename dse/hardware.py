"""GPU registry: one spec-sheet YAML file per GPU in `dse/hardware_specs/`, sources cited there."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from dse.errors import ConfigError


@dataclass(frozen=True)
class GPU:
    """One GPU's spec sheet. Units are in the field names."""

    name: str
    display_name: str
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float | None  # None: no FP8 tensor cores (A100)
    hbm_bw_bytes_per_s: float
    hbm_capacity_bytes: float
    board_power_w: float
    idle_power_w: float
    nvlink_bw_bytes_per_s: float  # per direction
    n_sms: int
    compute_capability: float  # 8.0 Ampere, 9.0 Hopper: which kernel families the engines run
    measured_power: bool  # True when the training data holds measured power for this GPU

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense tensor-core peak for a compute dtype; fp8 falls back to bf16 where absent."""
        if dtype in ("fp8", "fp8_block", "float8") and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s


@cache
def _registry() -> dict[str, GPU]:
    out: dict[str, GPU] = {}
    for entry in resources.files("dse.hardware_specs").iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        raw = yaml.safe_load(entry.read_text())
        missing = [k for k in GPU.__dataclass_fields__ if k not in raw]
        if missing:
            raise ConfigError(f"GPU spec {entry.name}: missing field(s) {', '.join(missing)}")
        fields = {k: raw[k] for k in GPU.__dataclass_fields__}
        # YAML 1.1 reads "989.4e12" (no sign in the exponent) as a string: coerce numbers here.
        for key, value in fields.items():
            if key.endswith(("_per_s", "_bytes", "_w")) and value is not None:
                fields[key] = float(value)
        out[raw["name"]] = GPU(**fields)
    return out


def gpu_names() -> list[str]:
    """The names of every GPU in the registry, sorted."""
    return sorted(_registry())


def get_gpu(name: str) -> GPU:
    """Look up a GPU by registry name; an unknown name is an error listing the valid ones."""
    reg = _registry()
    key = str(name).strip().lower()
    if key in reg:
        return reg[key]
    close = difflib.get_close_matches(key, list(reg), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown GPU {name!r}{hint}; valid names: {', '.join(gpu_names())}")
