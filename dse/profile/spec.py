"""What a profile says about the device: the manifest (device, software, protocol, date) and
the GPU spec file `gpu.yaml` that lets `dse fit`, `dse predict` and sweeps use a GPU outside
the registry.

`gpu.yaml` carries the fields of `dse.spec.hardware.GPU` (what the predictor reads) plus a
`measured:` block (peak GEMM FLOP rate per dtype from a large square GEMM, peak memory
bandwidth from a device-to-device copy, idle power) and a `datasheet:` block (the registry's
spec sheet when the device is a registry GPU; absent otherwise, e.g. on a CPU). The GPU fields
are the datasheet's where there is one, else the measured values; `kernel_peaks` (written
once the tables are, `with_kernel_peaks`) holds the fastest rates each kernel kind reached
per dtype, which bound that kind's rows in `dse fit` and `dse validate`.
"""

from __future__ import annotations

import math
import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dse.errors import ConfigError
from dse.profile.timing import Clock, Protocol, measure
from dse.spec.hardware import (
    GPU,
    OPTIONAL_FIELDS,
    SPEC_FILE,
    get_gpu,
    gpu_names,
    kernel_peaks_to_mapping,
)

MANIFEST = "profile.json"
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")


def check_name(name: str, layer_ops: bool) -> str:
    """A GPU name the data readers give back unchanged (so `dse fit --gpu NAME` finds the
    rows): lowercase letters and digits; underscores only for a registry GPU, since vidur's
    reader cuts a folder name at the first '_' or '-'."""
    from dse.data import normalise_gpu, vidur_gpu

    n = str(name).strip()
    if not NAME_RE.match(n) or normalise_gpu(n) != n:
        raise ConfigError(
            f"GPU name {name!r}: use lowercase letters and digits (e.g. 'l40s', 'cputest'); "
            f"the data readers would read it back as {normalise_gpu(n)!r}"
        )
    if layer_ops and vidur_dir(n) is None:
        raise ConfigError(
            f"GPU name {name!r}: vidur's layer-op layout cuts a folder name at the first '_' "
            f"(it would read {vidur_gpu(n)!r}); use a name without '_', e.g. "
            f"{n.replace('_', '')!r}"
        )
    return n


def vidur_dir(name: str) -> str | None:
    """The compute/<gpu> folder name vidur's reader maps back to `name` (None if none does)."""
    from dse.data import vidur_gpu

    for cand in (name, name.split("_")[0]):
        if vidur_gpu(cand) == name:
            return cand
    return None


def registry_match(device_name: str) -> GPU | None:
    """The registry GPU a device string names (its datasheet), or None."""
    from dse.data import normalise_gpu

    key = normalise_gpu(device_name)
    return get_gpu(key) if key in gpu_names() and key in _shipped() else None


def _shipped() -> set[str]:
    from dse.spec.hardware import _registry

    return set(_registry())


def default_name(torch: Any, device: Any) -> str:
    """The GPU name a profile gets without --name: the registry name or a slug of the device."""
    if device.type != "cuda":
        return "cpu"
    from dse.data import normalise_gpu

    slug = normalise_gpu(torch.cuda.get_device_name(device))
    return slug if slug in _shipped() else re.sub(r"[^a-z0-9]", "", slug)


def device_info(torch: Any, device: Any, energy_info: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        **energy_info,
    }
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        info.update(
            name=p.name,
            memory_bytes=int(p.total_memory),
            n_sms=int(p.multi_processor_count),
            compute_capability=float(f"{p.major}.{p.minor}"),
            l2_bytes=int(getattr(p, "L2_cache_size", 0)),
            cudnn=torch.backends.cudnn.version(),
        )
    else:
        info.update(
            name=platform.processor() or platform.machine(),
            memory_bytes=int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")),
            n_sms=int(torch.get_num_threads()),  # the threads the ops ran on stand for SMs
            compute_capability=0.0,
            cpu_count=os.cpu_count(),
        )
    return info


def measure_peaks(torch: Any, device: Any, clock: Clock, dtypes: list[str]) -> dict[str, Any]:
    """Peak GEMM FLOP/s per dtype (square GEMM) and memory bandwidth (copy: read + write)."""
    from dse.profile import ops

    size, elems = ops.peak_sizes(device)
    proto = Protocol(warmup=2, min_repeats=5, max_repeats=20)
    out: dict[str, Any] = {"gemm_size": size, "copy_bytes": 2 * 4 * elems}
    for dtype in dtypes:
        try:
            k = ops.gemm(torch, device, dtype, size, size, size)
        except ops.Unsupported:
            continue
        t = measure(k.fn, clock, proto, None)
        out[f"peak_{dtype}_flops_per_s"] = 2.0 * size**3 / t.median_s
        del k
    src = torch.empty(elems, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    # the copy as a plain stream call: captured in a CUDA graph it became a copy-engine memcpy
    # node, 2.71 TB/s on an H200 against 4.12 TB/s for the kernel an op's reads see
    eager = Clock(torch, device, graphs=False)
    t = measure(lambda: dst.copy_(src), eager, proto, None)
    out["hbm_bw_bytes_per_s"] = 2.0 * 4 * elems / t.median_s
    return out


def gpu_spec(
    name: str, info: dict[str, Any], peaks: dict[str, Any], idle_w: float, measured_power: bool
) -> dict[str, Any]:
    """The gpu.yaml mapping: GPU fields (datasheet where known, else measured) + both blocks."""
    sheet = registry_match(str(info.get("name", ""))) if info["device"] != "cpu" else None
    bf16 = peaks.get("peak_bfloat16_flops_per_s") or peaks.get("peak_float16_flops_per_s")
    fp8 = peaks.get("peak_fp8_flops_per_s")
    power_limit = info.get("power_limit_w")
    spec: dict[str, Any] = {
        "name": name,
        "display_name": f"{info.get('name', name)} (profiled)",
        "peak_bf16_flops_per_s": float(bf16) if bf16 else None,
        "peak_fp8_flops_per_s": float(fp8) if fp8 else None,
        "hbm_bw_bytes_per_s": float(peaks["hbm_bw_bytes_per_s"]),
        "hbm_capacity_bytes": float(info["memory_bytes"]),
        "board_power_w": float(power_limit) if power_limit else None,
        "idle_power_w": None if math.isnan(idle_w) else float(idle_w),
        # not measured (one GPU): the registry's NVLink where known, else none
        "nvlink_bw_bytes_per_s": 0.0,
        "n_sms": int(info["n_sms"]),
        "compute_capability": float(info["compute_capability"]),
        "measured_power": bool(measured_power),
    }
    if sheet is not None:
        for key in GPU.__dataclass_fields__:
            if key not in ("name", "display_name", "measured_power", *OPTIONAL_FIELDS):
                spec[key] = getattr(sheet, key)
        spec["datasheet"] = {
            "registry_gpu": sheet.name,
            "peak_bf16_flops_per_s": sheet.peak_bf16_flops_per_s,
            "peak_fp8_flops_per_s": sheet.peak_fp8_flops_per_s,
            "hbm_bw_bytes_per_s": sheet.hbm_bw_bytes_per_s,
        }
        spec["fields_from"] = f"datasheet (registry {sheet.name}); measured values below"
    else:
        spec["fields_from"] = "measured (no datasheet known for this device)"
    if spec["peak_bf16_flops_per_s"] is None:
        raise ConfigError("no bf16/float16 GEMM could be timed: the spec needs a peak rate")
    spec["measured"] = {
        **{k: v for k, v in peaks.items() if k.endswith("_per_s")},
        "idle_power_w": spec["idle_power_w"]
        if sheet is None
        else (None if math.isnan(idle_w) else idle_w),
        "gemm_size": peaks["gemm_size"],
        "copy_bytes": peaks["copy_bytes"],
    }
    return spec


def with_kernel_peaks(folder: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` with `kernel_peaks`: the fastest FLOP/s and bytes/s each kernel kind reached per
    dtype in the folder's tables (`dse.fitting.plausible.measured_peaks`). The physical floors
    of the device's rows read them, kind by kind: one kind's peak never bounds another's rows
    (bf16 SDPA ran 16x faster than bf16 matmul on an AVX2 CPU)."""
    from dse.data import KINDS, load
    from dse.fitting.plausible import KERNEL_KINDS, measured_peaks

    tables = load(folder, [k for k in KERNEL_KINDS if k in KINDS])
    peaks = kernel_peaks_to_mapping(measured_peaks(tables, spec["name"]))
    out = {k: v for k, v in spec.items() if k != "kernel_peaks"}
    at = list(out).index("fields_from") if "fields_from" in out else len(out)
    items = list(out.items())
    return dict([*items[:at], ("kernel_peaks", peaks), *items[at:]])


def write_spec(folder: Path, spec: dict[str, Any]) -> Path:
    from dse.files import write_atomic

    header = (
        "# GPU spec written by `dse profile` (measured peaks under `measured:`).\n"
        "# Fields follow dse/hardware_specs/*.yaml; null power = not measured.\n"
    )
    path = folder / SPEC_FILE
    write_atomic(path, header + yaml.safe_dump(spec, sort_keys=False))
    return path


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
