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
(the only difference between the two paths).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
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


class Clock:
    """Times `calls` back-to-back calls of a function: CUDA events on a GPU, perf_counter
    after synchronizing on a CPU."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], Any], calls: int) -> float:
        """Seconds for `calls` calls."""
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
    first = clock.time(fn, 1)
    calls = int(min(max(math.ceil(proto.min_sample_s / max(first, 1e-9)), 1), proto.max_calls))
    samples: list[float] = []
    width = math.inf
    while len(samples) < proto.max_repeats:
        samples.append(clock.time(fn, calls) / calls)
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
    )
