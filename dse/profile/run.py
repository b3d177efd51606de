"""The profile loop: plan the shapes, estimate the time, measure each shape once, record it.

    summary = run_profile(ProfileOptions(out=Path("prof"), device="cpu", quick=True))

Order: the shapes of every table are visited coarse to fine (bit-reversed index order) and the
tables are interleaved, so a run cut short by `--max-minutes` or an interrupt still holds a
spread of every table; rerunning the same command measures only the shapes the journal lacks.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import ConfigError, DSEError
from dse.files import write_atomic
from dse.profile import grid, ops
from dse.profile.energy import NoEnergy, NvmlEnergy, reader_for
from dse.profile.spec import (
    MANIFEST,
    check_name,
    default_name,
    device_info,
    gpu_spec,
    measure_peaks,
    now,
    vidur_dir,
    with_kernel_peaks,
    write_spec,
)
from dse.profile.timing import Clock, Flusher, Protocol, measure
from dse.profile.writer import Journal, write_tables
from dse.spec.hardware import SPEC_FILE

FORMAT_VERSION = 1
REBUILD_EVERY_S = 30.0  # rebuild the tables from the journal at most this often during a run
# the estimate's per-call overhead (launch + Python dispatch) and per-shape setup, seconds
OVERHEAD_S = {"cuda": 8e-6, "cpu": 15e-6}
SETUP_S = {"cuda": 2e-3, "cpu": 1e-3}


@dataclass
class ProfileOptions:
    out: Path
    device: str = "cuda:0"
    ops: tuple[str, ...] = grid.OPS
    dtypes: tuple[str, ...] = ("bfloat16",)
    quick: bool = False
    max_minutes: float | None = None
    offset: int = 0
    name: str | None = None
    energy_s: float = 1.0
    threads: int | None = None  # CPU intra-op threads (None: 1 on a CPU; see resolve_threads)
    progress: bool = True
    protocol: Protocol = field(default_factory=Protocol)


def import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ConfigError(
            "dse profile needs PyTorch (and nvidia-ml-py for energy on a GPU): "
            "pip install 'dse[profile]'"
        ) from None
    return torch


def resolve_device(torch: Any, text: str) -> Any:
    t = str(text).strip().lower()
    if t == "cpu":
        return torch.device("cpu")
    if t == "cuda" or t.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"--device {text}: no CUDA GPU is visible (torch {torch.__version__}, CUDA "
                f"build {torch.version.cuda or 'none'}); use --device cpu to profile the CPU"
            )
        dev = torch.device(t)
        n = torch.cuda.device_count()
        if (dev.index or 0) >= n:
            raise ConfigError(
                f"--device {text}: only {n} CUDA GPU(s) visible (cuda:0..cuda:{n - 1})"
            )
        torch.cuda.set_device(dev.index or 0)  # events and streams of this GPU
        return torch.device("cuda", dev.index or 0)
    raise ConfigError(f"--device {text!r}: use cuda, cuda:N or cpu")


def check_out(out: Path) -> None:
    """The output folder exists or can be made, and takes files."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_probe"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot write there ({exc.strerror or exc})") from None


def check_dtypes(dtypes: tuple[str, ...]) -> list[str]:
    valid = ("bfloat16", "float16", "fp8")
    bad = [d for d in dtypes if d not in valid]
    if bad or not dtypes:
        raise ConfigError(
            f"unknown dtype(s) {', '.join(bad) or '(none)'}; valid: {', '.join(valid)}"
        )
    return list(dict.fromkeys(dtypes))


# ---------------------------------------------------------------------------- order, estimate
def _bitrev_order(n: int) -> list[int]:
    """0..n-1 coarse to fine: by bit-reversed index (0, n/2, n/4, 3n/4, ...)."""
    bits = max(1, math.ceil(math.log2(max(n, 2))))
    return sorted(range(n), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))


def interleave(items: list[tuple[str, str, grid.Shape]]) -> list[tuple[str, str, grid.Shape]]:
    groups: dict[tuple[str, str], list[tuple[str, str, grid.Shape]]] = {}
    for it in items:
        groups.setdefault((it[0], it[1]), []).append(it)
    queues = [[g[i] for i in _bitrev_order(len(g))] for g in groups.values()]
    out = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def _work(table: str, dtype: str, s: grid.Shape) -> tuple[float, float, int]:
    """(FLOPs, bytes, kernel launches) of one call of a shape: the estimate's roofline."""
    e = 1.0 if dtype == "fp8" else 2.0
    if table == "gemm":
        m, n, k = s["m"], s["n"], s["k"]
        return 2.0 * m * n * k, e * (m * k + n * k + m * n), 1
    if table in ("context_attention", "generation_attention"):
        b, h, kv, d = s["batch_size"], s["num_heads"], s["num_kv_heads"], s["head_dim"]
        if table == "context_attention":
            q = n = s["isl"]
            flops = 2.0 * b * h * d * q * n  # causal half of 4 b h d s^2
        else:
            q, n = 1, s["kv_len"] + 1
            flops = 4.0 * b * h * d * n
        return flops, e * b * d * (2 * h * q + 2 * kv * n), 1
    if table == "moe":
        t, k, hs, i, ne = (
            s[c] for c in ("num_tokens", "topk", "hidden_size", "inter_size", "num_experts")
        )
        touched = min(ne, t * k)
        return 6.0 * t * k * hs * i, e * (touched * 3 * hs * i + 4 * t * k * hs), 3 + 5 * touched
    if table == "layer_op":
        t, d, ff = s["num_tokens"], s["d_model"], s["d_ff"]
        return 0.0, e * t * (12 * d + 3 * ff), 5 * 8
    return 0.0, 2.0 * s.get("message_elements", 0), 1


def estimate_s(
    items: list[tuple[str, str, grid.Shape]],
    peaks: dict[str, Any],
    kind: str,
    proto: Protocol,
    energy: bool,
    flush_bytes: int = 0,
    energy_tables: set[str] | None = None,
) -> list[float]:
    """Seconds each shape is expected to take (roofline at the measured peaks + overheads,
    times the calls the protocol makes, + the energy loop)."""
    bw = float(peaks["hbm_bw_bytes_per_s"])
    out = []
    for table, dtype, s in items:
        flops, nbytes, launches = _work(table, dtype, s)
        peak = float(
            peaks.get(f"peak_{dtype}_flops_per_s") or peaks.get("peak_bfloat16_flops_per_s") or 1e12
        )
        t = max(flops / peak, nbytes / bw) + launches * OVERHEAD_S[kind]
        sample = max(t, proto.min_sample_s)
        n_ops = len(ops.LAYER_OPS) if table == "layer_op" else 1
        # ~12 samples (noisy shapes run to max_repeats), each with its timer overhead; the
        # flush writes flush_bytes; building the operands touches them a few times
        samples = min(proto.max_repeats, 12)
        per = (proto.warmup + 1) * t + samples * (sample + 3 * OVERHEAD_S[kind])
        per += SETUP_S[kind] + (flush_bytes + 4 * nbytes) / bw
        metered = energy and (energy_tables is None or table in energy_tables)
        out.append(n_ops * per + (proto.energy_s if metered else 0.0))
    return out


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60.0:.1f} min"


# ---------------------------------------------------------------------------- one shape
def _row(t: Any) -> dict[str, Any]:
    return {
        "latency_s": t.median_s,
        "latency_mean_s": t.mean_s,
        "latency_std_s": t.std_s,
        "latency_min_s": t.min_s,
        "latency_max_s": t.max_s,
        "repeats": t.repeats,
        "calls": t.calls,
        "ci_rel_halfwidth": t.ci_rel_halfwidth,
        "timer": t.timer,
    }


def _energy_row(
    sample: Callable[[], Any], sample_s: float, clock: Clock, reader: Any, seconds: float
) -> dict[str, Any]:
    """Mean board power over a sustained loop of >= `seconds` of the timed sample (the graph
    replay on a GPU, so the power is that of back-to-back kernels, not of launch gaps; NaN
    where not measured)."""
    if isinstance(reader, NoEnergy) or seconds <= 0:
        return {"power_w": math.nan, "energy_seconds": math.nan}

    # samples enqueued in bursts of >= 10 ms between host syncs, so the GPU never waits on
    # the host mid-loop
    burst = max(1, math.ceil(0.01 / max(sample_s, 1e-7)))

    def loop() -> float:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(burst):
                sample()
            clock.sync()
        return time.perf_counter() - t0

    joules, secs = reader.energy_j(loop)
    return {"power_w": joules / secs if secs > 0 else math.nan, "energy_seconds": secs}


def measure_shape(
    torch: Any,
    device: Any,
    table: str,
    dtype: str,
    s: grid.Shape,
    clock: Clock,
    proto: Protocol,
    flush: Flusher,
    reader: Any,
    energy_s: float,
) -> dict[str, Any]:
    """One journal row: the shape, its timing and power, or why it was skipped."""
    builders: dict[str, Callable[..., ops.Kernel]] = {
        "gemm": ops.gemm,
        "context_attention": ops.context_attention,
        "generation_attention": ops.generation_attention,
        "moe": ops.moe,
    }
    try:
        if table == "layer_op":
            kw = {k: s[k] for k in ("num_tokens", "d_model", "n_heads", "n_kv_heads", "d_ff")}
            kernels = ops.layer_ops(torch, device, dtype, **kw)
            rows = []
            for op, kern in kernels.items():
                t = measure(kern.fn, clock, proto, flush)
                rows.append({"op": op, "kernel_source": kern.kernel_source, **_row(t)})
            return {**s, "dtype": dtype, "ops": rows}
        kern = builders[table](torch, device, dtype, **s)
        t = measure(kern.fn, clock, proto, flush)
        row = {**s, "dtype": dtype, "kernel_source": kern.kernel_source, **_row(t)}
        assert t.sample is not None
        row.update(_energy_row(t.sample, t.median_s * t.calls, clock, reader, energy_s))
        return row
    except ops.Unsupported as exc:
        return {**s, "dtype": dtype, "skipped": str(exc)}
    except RuntimeError as exc:  # out of memory, a shape a kernel refuses: recorded, skipped
        if device.type == "cuda":
            torch.cuda.empty_cache()
        msg = "out of memory" if "out of memory" in str(exc).lower() else str(exc)[:300]
        return {**s, "dtype": dtype, "skipped": f"{type(exc).__name__}: {msg}"}


# ---------------------------------------------------------------------------- the run
class _StopRequest:
    """Ctrl-C or SIGTERM asks the run to stop after the shape being measured (whose row is
    then journalled); a second one stops at once. Checked by the loop between shapes, so a
    signal that lands inside a kernel call (where a library may turn the KeyboardInterrupt
    into an error of its own) still ends the run."""

    def __init__(self) -> None:
        self.requested = False

    def handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def _stop_on_signals() -> Iterator[_StopRequest]:
    """A `_StopRequest` bound to SIGTERM and to SIGINT (unless SIGINT is ignored, as in a
    background job): the run ends like Ctrl-C, the tables rebuilt from the journal first."""
    stop = _StopRequest()
    old: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                continue
            old[sig] = signal.signal(sig, stop.handler)
    except ValueError:  # not the main thread: signals stay as they are
        pass
    try:
        yield stop
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def _read_manifest(out: Path) -> dict[str, Any] | None:
    import json

    p = out / MANIFEST
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{p}: not a readable profile manifest ({exc})") from None


def run_profile(opts: ProfileOptions, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Measure every planned shape not in the journal yet; returns the manifest written."""
    import json

    wanted_ops = grid.check_ops(list(opts.ops))
    dtypes = check_dtypes(tuple(opts.dtypes))
    if opts.max_minutes is not None and opts.max_minutes <= 0:
        raise ConfigError(f"--max-minutes must be > 0, got {opts.max_minutes:g}")
    if opts.energy_s < 0:
        raise ConfigError(f"--energy-seconds must be >= 0, got {opts.energy_s:g}")
    torch = import_torch()
    device = resolve_device(torch, opts.device)
    if device.type == "cpu":
        # One intra-op thread unless asked: OpenMP's barriers stall for milliseconds when the
        # cores are shared, which turns a 50 us op into a 50 ms outlier.
        torch.set_num_threads(opts.threads or 1)
    out = Path(opts.out)
    check_out(out)
    name = check_name(opts.name or default_name(torch, device), "layer_ops" in wanted_ops)
    previous = _read_manifest(out)
    reader = reader_for(device)
    info = device_info(torch, device, reader.info())
    if previous is not None:
        if previous.get("gpu") != name:
            raise ConfigError(
                f"{out} holds a profile of GPU {previous.get('gpu')!r}; continue it with "
                f"--name {previous.get('gpu')} or choose another --out"
            )
        if previous.get("device", {}).get("name") != info["name"]:
            raise ConfigError(
                f"{out} was profiled on {previous.get('device', {}).get('name')!r}, this is "
                f"{info['name']!r}; choose another --out"
            )
    level = ("tiny" if device.type == "cpu" else "quick") if opts.quick else "full"
    # fp8 only has a GEMM path; the other tables run in the first non-fp8 dtype
    other = [d for d in dtypes if d != "fp8"] or ["bfloat16"]
    items = [
        (t, d, s)
        # non-fp8 dtypes first: layer ops and all-reduce run in the first one
        for t, d, s in grid.plan(
            wanted_ops, other + ["fp8"] * ("fp8" in dtypes), level, opts.offset
        )
        if t == "gemm"
        or d == other[0]
        or (d in other and t in ("context_attention", "generation_attention", "moe"))
    ]
    notes: dict[str, str] = {}
    items = [it for it in items if it[0] != "allreduce"]
    ar_items: list[tuple[str, str, grid.Shape]] = []
    if "allreduce" in wanted_ops:
        n_gpu = torch.cuda.device_count() if device.type == "cuda" else 0
        if n_gpu < 2:
            notes["allreduce"] = f"skipped: {n_gpu} GPU(s) visible, an all-reduce needs at least 2"
        else:
            from dse.profile.allreduce import group_sizes

            sizes = group_sizes(n_gpu)
            ar_items = [
                ("allreduce", other[0], {"num_gpus": n, **s})
                for n in sizes
                for s in grid.allreduce_shapes(level, opts.offset)
            ]
            notes["allreduce"] = (
                f"torch.distributed all_reduce (NCCL), groups of {sizes} GPUs, a fixed schedule "
                "(warm-up 5, 15 samples); not exercised on a multi-GPU machine yet"
            )
        items += ar_items
    journal = Journal(out)
    done = journal.done()
    todo = interleave(
        [it for it in items if grid.shape_key(*it) not in done and it[0] != "allreduce"]
    )
    ar_todo = [it for it in ar_items if grid.shape_key(*it) not in done]
    clock = Clock(torch, device)
    proto = opts.protocol
    if level == "tiny":  # the tiny grid must stay well under a minute
        proto = Protocol(**{**proto.__dict__, "max_repeats": min(proto.max_repeats, 15)})
    if device.type == "cuda":
        proto = Protocol(**{**proto.__dict__, "energy_s": opts.energy_s})
    else:
        proto = Protocol(**{**proto.__dict__, "energy_s": 0.0})
    started = now()
    t_start = time.perf_counter()
    # idle first: read after the peak loops, an H200 still drew 123 W at 1980 MHz for seconds
    # (80 W at 345 MHz before them), which the fit would take for idle power
    idle_w = reader.idle_power_w(2.0) if isinstance(reader, NvmlEnergy) else math.nan
    peaks = (
        measure_peaks(torch, device, clock, dtypes)
        if previous is None or "peaks" not in previous
        else previous["peaks"]
    )
    if previous is not None and previous.get("idle_power_w") is not None:
        idle_w = float(previous["idle_power_w"])
    measured_power = isinstance(reader, NvmlEnergy)
    spec = gpu_spec(name, info, peaks, idle_w, measured_power)
    write_spec(out, spec)

    flush = Flusher(torch, device, ops.l2_bytes(torch, device))
    # --quick reads energy on the GEMM shapes only (the power model is fitted on them): 1 s a
    # shape for every table would make a quick GPU run ~20 minutes
    energy_tables = {"gemm"} if opts.quick else set(grid.TABLES)
    est = estimate_s(todo, peaks, device.type, proto, measured_power, flush.bytes, energy_tables)
    budget_s = opts.max_minutes * 60.0 if opts.max_minutes is not None else math.inf
    # what is left of the budget after the peak measurements goes to the shapes
    shapes_budget_s = budget_s - (time.perf_counter() - t_start)
    deferred = 0
    if sum(est) > shapes_budget_s:
        keep, acc = 0, 0.0
        for e in est:
            if acc + e > shapes_budget_s:
                break
            acc += e
            keep += 1
        deferred = len(todo) - keep
        todo, est = todo[:keep], est[:keep]
    total_est = sum(est)
    log(
        f"dse profile: {name} on {info['name']} ({device}), grid {level}"
        f"{' offset 1' if opts.offset else ''}: {len(items)} shapes planned, "
        f"{len(items) - len(todo) - len(ar_todo) - deferred} already measured, {len(todo)} to measure now, "
        f"estimated {_duration(total_est)}"
        + (
            f"; {deferred} left for a later run (--max-minutes {opts.max_minutes:g})"
            if deferred
            else ""
        )
    )
    vgpu = vidur_dir(name)
    status = "complete"
    measured = skipped = 0
    last_build = time.perf_counter()

    def rebuild() -> dict[str, int]:
        return write_tables(out, name, vgpu, journal, info)

    def write_manifest(counts: dict[str, int], pending: int) -> dict[str, Any]:
        runs = list(previous.get("runs", [])) if previous else []
        runs.append(
            {
                "started": started,
                "finished": now(),
                "seconds": round(time.perf_counter() - t_start, 1),
                "measured": measured,
                "skipped": skipped,
                "status": status,
                "grid": level,
                "offset": opts.offset,
                "ops": wanted_ops,
                "dtypes": dtypes,
            }
        )
        manifest = {
            "format_version": FORMAT_VERSION,
            "gpu": name,
            "created": previous.get("created", started) if previous else started,
            "updated": now(),
            "device": info,
            "peaks": peaks,
            "idle_power_w": None if math.isnan(idle_w) else idle_w,
            "energy": {
                "method": reader.method,
                "note": "energy not measured: power and energy are NaN in every row"
                if not measured_power
                else f"mean board power (idle included) over a sustained loop of >= {proto.energy_s:g} s "
                f"per shape of {', '.join(sorted(energy_tables))}",
            },
            "protocol": proto.describe(),
            "routing": {
                "balanced": "round robin: pair i -> expert i mod E (min(E, T k) experts touched)",
                "uniform": "each (token, slot) draws an expert uniformly, distinct per token, seeded",
                "power_law_1.2": "expert e with probability (e+1)^-1.2, distinct per token, seeded",
            },
            "engine": "pytorch (eager; engine column 'pytorch', version = torch version)",
            "tables": counts,
            "notes": notes,
            "pending": pending,  # planned shapes not measured yet (a rerun measures them)
            "runs": runs,
        }
        write_atomic(
            out / MANIFEST, json.dumps(manifest, indent=1, allow_nan=False, default=str) + "\n"
        )
        return manifest

    bar = None
    if opts.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(todo), desc=f"profile {name}", unit="shape", dynamic_ncols=True)
    try:
        with _stop_on_signals() as stop:
            for table, dtype, s in todo:
                stop.check()
                if time.perf_counter() - t_start > budget_s:
                    status = "budget"
                    break
                e_s = proto.energy_s if table in energy_tables else 0.0
                row = measure_shape(
                    torch, device, table, dtype, s, clock, proto, flush, reader, e_s
                )
                row["key"] = grid.shape_key(table, dtype, s)
                journal.append(table, row)
                skipped += bool(row.get("skipped"))
                measured += not row.get("skipped")
                if bar is not None:
                    bar.update(1)
                stop.check()
                if time.perf_counter() - last_build > REBUILD_EVERY_S:
                    rebuild()
                    last_build = time.perf_counter()
            stop.check()
            if ar_todo and status == "complete":
                # all ranks in one spawn: every missing (group size, message) at once
                from dse.profile.allreduce import measure_allreduce

                for row in measure_allreduce([sh for _, _, sh in ar_todo], ar_todo[0][1]):
                    shape = {k: row[k] for k in ("num_gpus", "message_elements")}
                    row["key"] = grid.shape_key("allreduce", row["dtype"], shape)
                    journal.append("allreduce", row)
                    measured += 1
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if bar is not None:
            bar.close()
        left = deferred + (len(todo) + len(ar_todo) - measured - skipped)
        if left and status == "complete":
            status = "budget"
        manifest = write_manifest(rebuild(), left)
        try:  # the rates each kernel kind reached, read back from the tables just written
            write_spec(out, with_kernel_peaks(out, spec))
        except DSEError as exc:  # unreadable tables: `dse fit` names the file; the run stands
            log(f"dse profile: kernel_peaks not written to {SPEC_FILE}: {exc}")
    log(
        f"dse profile: {measured} shapes measured, {skipped} skipped, {left} left in "
        f"{_duration(time.perf_counter() - t_start)}"
        + (" (rerun the same command to continue)" if left else "")
        + f"; wrote {out}"
    )
    for key, note in notes.items():
        log(f"dse profile: {key} {note}")
    return manifest
