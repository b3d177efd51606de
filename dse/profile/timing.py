"""How one shape is timed: warm-up, an L2 flush, then repeats until the median is stable.

Protocol (stated in every profile's manifest):
- warm-up: `warmup` untimed calls (kernel selection, allocator, caches of the library);
- one timed call sizes a *sample*: `calls` back-to-back calls such that a sample lasts at least
  `min_sample_s` (CUDA events resolve ~0.5 us; a CPU perf_counter ~0.1 us, but Python's call
  overhead is ~5 us), so the per-call time is the sample time / calls;
- the L2 (CPU: last-level cache) is flushed once before the shape by writing a buffer twice
  its size, so a shape never starts on the previous shape's cached operands;
- samples are drawn until the distribution-free 95% confidence interval of the median
  (order statistics, normal approximation of the binomial) has a relative half-width below
  `rel_halfwidth` (2%), with at least `min_repeats` and at most `max_repeats` samples;
- each row records the median (the latency), mean, std, min, max, the samples drawn, the calls
  per sample and the achieved half-width.
Device time comes from CUDA events on a GPU and from perf_counter after a synchronize on a CPU
(the only difference between the two paths). On a GPU a sample's calls are captured once in a
CUDA graph and replayed: timed as a Python loop, every call under ~15 us costs the host's launch
time instead (an H200 behind a VM's CPU: 15 us for a 1024 x 1024 GEMV, 1.6-1.8x what vLLM's
graph-replayed kernels take), and serving engines replay graphs. A kernel that cannot be
captured (a host sync inside it) falls back to the loop; the row's `timer` says which ran.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Protocol:
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    rel_halfwidth: float = 0.02  # stop when the 95% CI of the median is within +-2%
    min_sample_s: float = 1e-4  # one sample lasts at least 100 us
    max_calls: int = 1000  # at most this many calls per sample
    energy_s: float = 1.0  # sustained loop per shape for the energy reading (GPU)

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "statistic": "median of samples; sample = calls back-to-back / calls",
            "stop_rule": "relative half-width of the distribution-free 95% CI of the median "
            f"< {self.rel_halfwidth:g}, or {self.max_repeats} samples",
            "l2_flush": "a buffer of twice the L2 (CPU: last-level cache) written before "
            "each shape",
            "timer": "GPU: CUDA events around a CUDA graph replay of the sample's calls (a "
            "Python loop where capture fails, named in the row's timer); CPU: perf_counter",
        }


@dataclass(frozen=True)
class Timing:
    """Per-call seconds of one shape (median is the latency) and how they were obtained."""

    median_s: float
    mean_s: float
    std_s: float
    min_s: float
    max_s: float
    repeats: int
    calls: int
    ci_rel_halfwidth: float
    timer: str = "perf-counter"
    # one sample (`calls` calls; a graph replay on a GPU): the energy loop reuses it
    sample: Callable[[], Any] | None = field(default=None, repr=False, compare=False)


def median_ci_rel_halfwidth(samples: np.ndarray) -> float:
    """Relative half-width of the distribution-free 95% CI of the median: the order
    statistics at n/2 -+ 1.96 sqrt(n)/2 (inf below 5 samples, where the interval is the range)."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n < 5:
        return math.inf
    half = 1.96 * math.sqrt(n) / 2.0
    lo = max(math.floor(n / 2.0 - half), 0)
    hi = min(math.ceil(n / 2.0 + half), n - 1)
    med = float(np.median(x))
    return float((x[hi] - x[lo]) / 2.0 / med) if med > 0 else math.inf


# GPU cycles the stream spins before a timed sample (~100 us at 2 GHz) while the host enqueues
# the start event, the sample and the end event: the host's launch latency is then not timed
SPIN_CYCLES = 200_000


class Clock:
    """Times `calls` back-to-back calls of a function: CUDA events on a GPU (the calls replayed
    from a CUDA graph where `graphs`), perf_counter after synchronizing on a CPU."""

    def __init__(self, torch: Any, device: Any, graphs: bool = True) -> None:
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"
        self.graphs = self.cuda and graphs

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def batch(self, fn: Callable[[], Any], calls: int) -> tuple[Callable[[], Any], str]:
        """One sample: a callable making `calls` back-to-back calls, and the timer's name (a
        CUDA graph's replay where the calls can be captured, else a Python loop)."""

        def loop() -> None:
            for _ in range(calls):
                fn()

        if not self.graphs:
            return loop, "cuda-events" if self.cuda else "perf-counter"
        torch = self.torch
        try:
            # capture wants the kernels' workspaces allocated outside it: one call on a side
            # stream first (PyTorch's documented warm-up for capture)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                fn()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                loop()
        except Exception as exc:  # a host sync or an uncapturable op inside the kernel
            torch.cuda.synchronize(self.device)
            return loop, f"cuda-events (graph capture failed: {type(exc).__name__})"
        return graph.replay, "cuda-graph"

    def time_sample(self, run: Callable[[], Any]) -> float:
        """Seconds of one `run()` (a sample from `batch`)."""
        if self.cuda:
            torch = self.torch
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            spin = getattr(torch.cuda, "_sleep", None)
            if spin is not None:
                spin(SPIN_CYCLES)
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0  # ms -> s
        t0 = time.perf_counter()
        run()
        return time.perf_counter() - t0

    def time(self, fn: Callable[[], Any], calls: int) -> float:
        """Seconds for `calls` calls (a Python loop, no graph)."""
        if self.cuda:
            start = self.torch.cuda.Event(enable_timing=True)
            end = self.torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0  # ms -> s
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0


class Flusher:
    """Evicts the cache between shapes by writing a buffer twice its size."""

    def __init__(self, torch: Any, device: Any, cache_bytes: int) -> None:
        n = max(2 * int(cache_bytes) // 4, 1024)
        self.buf = torch.empty(n, dtype=torch.float32, device=device)
        self.bytes = 4 * n

    def __call__(self) -> None:
        self.buf.fill_(1.0)


def measure(fn: Callable[[], Any], clock: Clock, proto: Protocol, flush: Flusher | None) -> Timing:
    """Time one shape under `proto` (warm-up, flush, sized samples, stable median)."""
    for _ in range(proto.warmup):
        fn()
    clock.sync()
    if flush is not None:
        flush()
        clock.sync()
    one, timer = clock.batch(fn, 1)
    first = clock.time_sample(one)
    calls = int(min(max(math.ceil(proto.min_sample_s / max(first, 1e-9)), 1), proto.max_calls))
    run, timer = (one, timer) if calls == 1 else clock.batch(fn, calls)
    del one
    samples: list[float] = []
    width = math.inf
    while len(samples) < proto.max_repeats:
        samples.append(clock.time_sample(run) / calls)
        if len(samples) >= proto.min_repeats:
            width = median_ci_rel_halfwidth(np.array(samples))
            if width < proto.rel_halfwidth:
                break
    x = np.array(samples)
    return Timing(
        median_s=float(np.median(x)),
        mean_s=float(x.mean()),
        std_s=float(x.std(ddof=1)) if x.size > 1 else 0.0,
        min_s=float(x.min()),
        max_s=float(x.max()),
        repeats=int(x.size),
        calls=calls,
        ci_rel_halfwidth=float(width),
        timer=timer,
        sample=run,
    )
