"""GPU registry: one spec-sheet YAML file per GPU in `dse/hardware_specs/`, sources cited there.

GPUs outside it come from `dse profile`: a profile folder and the artifact `dse fit` makes from
it both carry the GPU's spec as `gpu.yaml` (same fields, measured peaks beside the datasheet
ones, and `kernel_peaks`: the fastest rates each kernel kind reached on the device, which bound
that kind's rows in `dse.fitting.plausible`). Artifact folders under $DSE_SURROGATES (else the shipped surrogates/) that hold one are
registry GPUs too; `register_gpu` adds one for this process (`dse fit` reading a profile).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dse.errors import ConfigError


@dataclass(frozen=True)
class KernelPeak:
    """The fastest rates one kind of kernel reached at one dtype on a profiled device: the
    highest FLOP/s and bytes/s over every row of that kind (`dse.fitting.plausible.
    measured_peaks`, whose work counts they use); None where the kind moves no such work."""

    kind: str  # a data kind: gemm, context_attention, generation_attention, moe, layer_op, ...
    dtype: str  # the dtype the kind's floor reads (dse.fitting.plausible)
    flops_per_s: float | None
    bytes_per_s: float | None


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
    # A profiled device's measured rates per kernel kind and dtype (`dse profile` writes them;
    # empty for a spec sheet). One kind can run faster than another's peak on the same device
    # (bf16 SDPA 16x faster than bf16 matmul on an AVX2 CPU), so the physical floors of a
    # kind's rows read that kind's own rates (`dse.fitting.plausible`).
    kernel_peaks: tuple[KernelPeak, ...] = ()
    # Dense FP4 (nvfp4) tensor-core peak; None: no FP4 tensor cores (before Blackwell).
    peak_fp4_flops_per_s: float | None = None

    def kernel_peak(self, kind: str, dtype: str) -> KernelPeak | None:
        """The measured rates of one kernel kind at one dtype (None: not measured)."""
        for kp in self.kernel_peaks:
            if kp.kind == kind and kp.dtype == dtype:
                return kp
        return None

    def fastest_measured(self) -> tuple[float, float]:
        """(FLOP/s, bytes/s): the highest rates anything reached on this device, kernel peaks
        and the spec's own peaks together; the bound for a kind or dtype not measured."""
        flops = [self.peak_bf16_flops_per_s, self.peak_fp8_flops_per_s or 0.0]
        flops += [self.peak_fp4_flops_per_s or 0.0]
        flops += [kp.flops_per_s or 0.0 for kp in self.kernel_peaks]
        nbytes = [self.hbm_bw_bytes_per_s] + [kp.bytes_per_s or 0.0 for kp in self.kernel_peaks]
        return max(flops), max(nbytes)

    def peak_flops_per_s(self, dtype: str) -> float:
        """Dense tensor-core peak for a compute dtype; fp4 falls back to fp8, fp8 to bf16 where
        absent."""
        if dtype in ("nvfp4", "fp4", "mxfp4") and self.peak_fp4_flops_per_s:
            return self.peak_fp4_flops_per_s
        if dtype in ("nvfp4", "fp4", "mxfp4"):
            dtype = "fp8"
        if dtype in ("fp8", "fp8_block", "float8") and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s


SPEC_FILE = "gpu.yaml"  # a profiled GPU's spec, in its profile folder and its artifact folder
# Fields a spec file may leave out (their defaults): a registry sheet has no kernel peaks.
OPTIONAL_FIELDS = ("kernel_peaks", "peak_fp4_flops_per_s")


def kernel_peaks_from_mapping(raw: Any, where: str) -> tuple[KernelPeak, ...]:
    """`kernel_peaks:` of a spec file, {kind: {dtype: {flops_per_s, bytes_per_s}}}, as
    KernelPeaks (sorted); null or absent: none."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"GPU spec {where}: kernel_peaks must be a mapping kind -> dtype -> rates"
        )
    out = []
    for kind, per_dtype in raw.items():
        if not isinstance(per_dtype, Mapping):
            raise ConfigError(f"GPU spec {where}: kernel_peaks.{kind} must map dtype -> rates")
        for dtype, rates in per_dtype.items():
            if not isinstance(rates, Mapping):
                raise ConfigError(
                    f"GPU spec {where}: kernel_peaks.{kind}.{dtype} must hold flops_per_s and "
                    f"bytes_per_s, got {rates!r}"
                )
            vals = {}
            for key in ("flops_per_s", "bytes_per_s"):
                v = rates.get(key)
                try:
                    v = None if v is None else float(v)
                except (TypeError, ValueError):
                    raise ConfigError(
                        f"GPU spec {where}: kernel_peaks.{kind}.{dtype}.{key} must be a number "
                        f"or null, got {v!r}"
                    ) from None
                if v is not None and not (math.isfinite(v) and v > 0):
                    raise ConfigError(
                        f"GPU spec {where}: kernel_peaks.{kind}.{dtype}.{key} must be > 0, got {v!r}"
                    )
                vals[key] = v
            out.append(KernelPeak(str(kind), str(dtype), vals["flops_per_s"], vals["bytes_per_s"]))
    return tuple(sorted(out, key=lambda k: (k.kind, k.dtype)))


def kernel_peaks_to_mapping(peaks: tuple[KernelPeak, ...]) -> dict[str, dict[str, Any]]:
    """The `kernel_peaks:` mapping of a spec file (inverse of `kernel_peaks_from_mapping`)."""
    out: dict[str, dict[str, Any]] = {}
    for kp in peaks:
        out.setdefault(kp.kind, {})[kp.dtype] = {
            "flops_per_s": kp.flops_per_s,
            "bytes_per_s": kp.bytes_per_s,
        }
    return out


def spec_from_mapping(raw: Any, where: str) -> GPU:
    """A GPU from a spec mapping (the fields of `GPU`; other keys are ignored); `where` names
    the file in the error of a missing or non-numeric field."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"GPU spec {where}: expected a mapping of fields")
    missing = [k for k in GPU.__dataclass_fields__ if k not in raw and k not in OPTIONAL_FIELDS]
    if missing:
        raise ConfigError(f"GPU spec {where}: missing field(s) {', '.join(missing)}")
    fields = {k: raw[k] for k in GPU.__dataclass_fields__ if k not in OPTIONAL_FIELDS}
    # YAML 1.1 reads "989.4e12" (no sign in the exponent) as a string: coerce numbers here.
    # null board/idle power (a CPU: not measured) reads as NaN.
    for key, value in fields.items():
        if key.endswith(("_per_s", "_bytes", "_w")) and not (
            value is None and key in ("peak_fp8_flops_per_s",)
        ):
            try:
                fields[key] = math.nan if value is None else float(value)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"GPU spec {where}: {key} must be a number, got {value!r}"
                ) from None
    fp4 = raw.get("peak_fp4_flops_per_s")
    try:
        fp4 = None if fp4 is None else float(fp4)
    except (TypeError, ValueError):
        raise ConfigError(
            f"GPU spec {where}: peak_fp4_flops_per_s must be a number or null, got {fp4!r}"
        ) from None
    return GPU(
        **fields,
        kernel_peaks=kernel_peaks_from_mapping(raw.get("kernel_peaks"), where),
        peak_fp4_flops_per_s=fp4,
    )


def spec_to_mapping(gpu: GPU) -> dict[str, Any]:
    """A GPU's fields as a spec mapping (the inverse of `spec_from_mapping`): what an artifact
    records of the GPUs it was fitted for (`dse.models.artifact`, manifest "gpu_specs")."""
    out: dict[str, Any] = {k: getattr(gpu, k) for k in GPU.__dataclass_fields__}
    out["kernel_peaks"] = kernel_peaks_to_mapping(gpu.kernel_peaks)
    if gpu.peak_fp4_flops_per_s is None:  # pre-Blackwell: records stay as they were
        del out["peak_fp4_flops_per_s"]
    return out


def load_spec(path: str | Path) -> GPU:
    """The GPU of one spec file (a registry YAML or a profile's gpu.yaml)."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"GPU spec {p}: cannot read ({exc})") from None
    return spec_from_mapping(raw, str(p))


@cache
def _registry() -> dict[str, GPU]:
    out: dict[str, GPU] = {}
    for entry in resources.files("dse.hardware_specs").iterdir():
        if not entry.name.endswith(".yaml"):
            continue
        gpu = spec_from_mapping(yaml.safe_load(entry.read_text()), entry.name)
        out[gpu.name] = gpu
    return out


_EXTRA: dict[str, GPU] = {}  # registered in this process (`register_gpu`)


def register_gpu(gpu: GPU) -> None:
    """Make a GPU outside the registry known to this process (a profile's spec); a shipped
    registry name cannot be redefined."""
    if gpu.name in _registry() and _registry()[gpu.name] != gpu:
        raise ConfigError(f"GPU {gpu.name!r} is in the shipped registry; its spec cannot change")
    _EXTRA[gpu.name] = gpu


def register_folder_spec(folder: str | Path) -> GPU | None:
    """Register the GPU whose spec a profile (or artifact) folder carries as gpu.yaml; its
    GPU, or None without one. A shipped registry name keeps its spec sheet."""
    path = Path(folder) / SPEC_FILE
    if not path.is_file():
        return None
    gpu = load_spec(path)
    if gpu.name not in _registry():
        register_gpu(gpu)
    return gpu


def fp4_gpu_names() -> list[str]:
    """The shipped registry's GPUs with FP4 tensor cores (`peak_fp4_flops_per_s`), sorted: where
    an nvfp4 weight dtype can run (`dse.spec.rules.check_weight_dtype_on_gpu` names them)."""
    return sorted(n for n, g in _registry().items() if g.peak_fp4_flops_per_s)


def shipped_gpu(name: str) -> GPU | None:
    """The spec sheet of a GPU of the shipped registry (None for a profiled or unknown one)."""
    return _registry().get(name)


def _artifact_root() -> Path:
    from dse.resources import surrogates_dir

    return surrogates_dir()


@cache
def _profiled(root: str) -> dict[str, GPU]:
    """GPUs whose artifact folder under `root` carries a spec file (fitted from a profile)."""
    out: dict[str, GPU] = {}
    base = Path(root)
    if not base.is_dir():
        return out
    for spec in sorted(base.glob(f"*/{SPEC_FILE}")):
        gpu = load_spec(spec)
        out[gpu.name] = gpu
    return out


def profiled_names() -> list[str]:
    """GPUs outside the shipped registry: profiled (artifact with a spec) or registered here."""
    root = _artifact_root()
    extra = dict(_profiled(str(root))) if root is not None else {}
    extra.update(_EXTRA)
    return sorted(n for n in extra if n not in _registry())


def _all() -> dict[str, GPU]:
    root = _artifact_root()
    out = dict(_profiled(str(root))) if root is not None else {}
    out.update(_EXTRA)
    out.update(_registry())  # shipped spec sheets win over a same-named profile
    return out


def gpu_names() -> list[str]:
    """The names of every GPU in the registry (profiled ones included), sorted."""
    return sorted(_all())


def get_gpu(name: str) -> GPU:
    """Look up a GPU by registry name; an unknown name is an error listing the valid ones."""
    shipped = _registry()
    if name in shipped:  # the hot path (called per row by some models): no folder lookups
        return shipped[name]
    if name in _EXTRA:
        return _EXTRA[name]
    reg = _all()
    key = str(name).strip().lower()
    if key in reg:
        return reg[key]
    close = difflib.get_close_matches(key, list(reg), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown GPU {name!r}{hint}; valid names: {', '.join(gpu_names())}")
