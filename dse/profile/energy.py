"""How one shape's energy is read: the NVML total-energy counter, else dense power sampling.

- `nvml-energy-counter`: `nvmlDeviceGetTotalEnergyConsumption` (millijoules since the driver
  loaded; Volta and newer) read before and after a sustained loop of the op (>= 1 s, so the
  counter's update period, tens of ms, is < ~5% of the interval).
- `nvml-power-sampling`: where the counter is missing, `nvmlDeviceGetPowerUsage` (milliwatts)
  sampled every 5 ms by a thread during the same loop, integrated over time.
- CPU: not measured (energy and power are NaN in every row, and the manifest says so).
Board power includes idle power, as aiconfigurator's `power` column does; the idle power read
before the profile is recorded in the manifest. Never a trailing average read after the fact.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from typing import Any

SAMPLE_PERIOD_S = 0.005  # power sampling: every 5 ms


class NoEnergy:
    method = "not measured (CPU: no board power counter)"

    def idle_power_w(self, seconds: float = 1.0) -> float:
        return math.nan

    def energy_j(self, loop: Callable[[], float]) -> tuple[float, float]:
        """(joules, seconds) of `loop` (which runs the op and returns its duration): NaN."""
        return math.nan, math.nan

    def info(self) -> dict[str, Any]:
        return {"energy_method": self.method}


class NvmlEnergy:
    """NVML energy counter (or power sampling) of one GPU by index."""

    def __init__(self, index: int) -> None:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.method = "nvml-energy-counter"
        except pynvml.NVMLError:
            self.method = "nvml-power-sampling"

    def _power_w(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0  # mW -> W

    def idle_power_w(self, seconds: float = 1.0) -> float:
        """Mean board power over `seconds` with nothing running (sampled every 5 ms)."""
        vals = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            vals.append(self._power_w())
            time.sleep(SAMPLE_PERIOD_S)
        return float(sum(vals) / len(vals))

    def energy_j(self, loop: Callable[[], float]) -> tuple[float, float]:
        """(joules, seconds) over `loop()`, which runs the op and returns its own duration."""
        if self.method == "nvml-energy-counter":
            e0 = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            t0 = time.perf_counter()
            loop()
            t1 = time.perf_counter()
            e1 = self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            return (e1 - e0) / 1000.0, t1 - t0  # mJ -> J
        samples: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                samples.append((time.perf_counter(), self._power_w()))
                time.sleep(SAMPLE_PERIOD_S)

        th = threading.Thread(target=sample, daemon=True)
        t0 = time.perf_counter()
        th.start()
        loop()
        stop.set()
        th.join()
        t1 = time.perf_counter()
        if len(samples) < 2:
            return math.nan, t1 - t0
        # trapezoid over the samples, the mean power extended to the whole interval
        e = 0.0
        for (ta, pa), (tb, pb) in itertools.pairwise(samples):
            e += (tb - ta) * (pa + pb) / 2.0
        span = samples[-1][0] - samples[0][0]
        return (e / span * (t1 - t0) if span > 0 else math.nan), t1 - t0

    def info(self) -> dict[str, Any]:
        n = self.nvml
        out: dict[str, Any] = {"energy_method": self.method}
        for key, fn in (
            ("power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0),
            ("driver", n.nvmlSystemGetDriverVersion),
            ("sm_clock_max_mhz", lambda: n.nvmlDeviceGetMaxClockInfo(self.handle, n.NVML_CLOCK_SM)),
            (
                "mem_clock_max_mhz",
                lambda: n.nvmlDeviceGetMaxClockInfo(self.handle, n.NVML_CLOCK_MEM),
            ),
            ("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(self.handle, n.NVML_CLOCK_SM)),
        ):
            try:
                v = fn()
                out[key] = v.decode() if isinstance(v, bytes) else v
            except Exception:  # a query the driver does not support is recorded as absent
                out[key] = None
        return out


def reader_for(device: Any) -> NoEnergy | NvmlEnergy:
    """The energy reader of a torch device: NVML on CUDA (when nvidia-ml-py is installed)."""
    if device.type != "cuda":
        return NoEnergy()
    try:
        return NvmlEnergy(device.index or 0)
    except Exception:  # no nvidia-ml-py or no NVML: latency is still measured
        reader = NoEnergy()
        reader.method = "not measured (nvidia-ml-py missing or NVML unavailable)"
        return reader
