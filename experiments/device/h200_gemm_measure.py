"""Measure bf16 GEMM latency and board power on the GPU this runs on (a blind check set).

Feeds docs/blind_h200.md (it measured benchmarks/measurements/*.csv, which
benchmarks/gemm_blind_h200.py and tests/repo/test_blind_h200.py read).

Run on a machine with an NVIDIA GPU, PyTorch and nvidia-ml-py (the lent H200 has both):

    python3 experiments/device/h200_gemm_measure.py --out gemm_measured.csv

The shapes are chosen OFF the aiconfigurator lattice (real model weight shapes such as
n = 28672, k = 4096, and token counts such as m = 20, 300, 6000) so that no row was in any fit,
plus a few lattice shapes to measure how far this harness and machine sit from aiconfigurator's
(its vLLM collector: y = x[m,k] @ W[n,k]^T, CUDA-graph replay, NVML board power while the op loops
for about a second). Latency is per call in ms (the data's unit), power the mean of NVML samples
in W taken while the graph loops for `--power-s` seconds, idle included (as aiconfigurator's).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import random
import threading
import time

# Weight shapes (n, k) of real models (Llama-2/3, Qwen2.5, Mistral, Mixtral, Gemma, Yi, Falcon),
# fused QKV / gate+up / down / o_proj, some at tensor parallelism 2/4/8. None of these n or k
# values is on the aiconfigurator lattice except where the pair is (see LATTICE_NK).
OFF_NK = [
    (28672, 4096),
    (4096, 14336),
    (14336, 4096),
    (4608, 3584),
    (37888, 3584),
    (3584, 18944),
    (11008, 4096),
    (4096, 11008),
    (22016, 4096),
    (27648, 5120),
    (5120, 13824),
    (7680, 5120),
    (1280, 8192),
    (8192, 28672),
    (896, 4864),
    (2304, 2048),
    (9472, 3584),
    (3584, 4736),
    (2560, 2304),
    (18432, 2304),
    (2304, 9216),
    (4352, 2048),
    (2048, 5632),
    (11264, 2048),
    (10752, 6656),
    (6656, 17920),
    (35840, 6656),
    (2816, 4096),
    (4096, 2816),
    (6144, 14336),
    (5632, 4096),
    (4096, 5632),
    (3840, 5120),
    (5120, 3840),
    (1792, 8192),
    (8192, 7168),
    (2688, 5120),
    (5120, 6912),
    (13824, 5120),
    (15360, 4096),
]
# (n, k) pairs that ARE in the training share (harness/machine offset against aiconfigurator) ...
LATTICE_NK = [(4096, 4096), (8192, 8192), (1024, 4096), (6144, 8192), (12288, 5120)]
# ... and pairs of the lattice's own n, k values that the training share leaves out (kept back for
# blind validation, so the closest stand-in for it this machine can measure)
WITHHELD_NK = [
    (2048, 2048),
    (4096, 6144),
    (4096, 8192),
    (4096, 12288),
    (5120, 5120),
    (6144, 4096),
    (8192, 5120),
    (8192, 7168),
    (12288, 4096),
    (2560, 3584),
    (3584, 7168),
    (10240, 8192),
]
OFF_M = [1, 3, 20, 40, 72, 100, 150, 200, 300, 400, 600, 1000, 1500, 2500, 3000, 6000, 12000]
LATTICE_M = [1, 4, 8, 16, 64, 256, 1024, 2048, 4096, 16384]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--power-rows", type=int, default=150, help="rows that also get power")
    ap.add_argument("--power-s", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--protocol",
        choices=("aic", "dense"),
        default="aic",
        help="aic: aiconfigurator's vLLM collector protocol (6 weight copies per graph replay, "
        "3 warm-up replays, 6 timed replays or about 1 s (0.3 s below 0.1 ms) when power is "
        "read, averaged NVML power sampled every 100 ms); dense: one weight, ~4 ms per replay",
    )
    ap.add_argument("--budget-s", type=float, default=360.0, help="stop adding rows after this")
    args = ap.parse_args()

    import pynvml
    import torch

    t_start = time.perf_counter()
    dev = torch.device("cuda")
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = torch.cuda.get_device_name(0)
    rng = random.Random(args.seed)

    rows = [(m, n, k, "off_lattice") for (n, k), m in itertools.product(OFF_NK, OFF_M)]
    rows += [(m, n, k, "in_share") for (n, k), m in itertools.product(LATTICE_NK, LATTICE_M)]
    rows += [(m, n, k, "withheld") for (n, k), m in itertools.product(WITHHELD_NK, LATTICE_M)]
    rng.shuffle(rows)
    power_idx = set(rng.sample(range(len(rows)), min(args.power_rows, len(rows))))

    # Two NVML readings: the board's instantaneous power (field 186, NVML_FI_DEV_POWER_INSTANT)
    # and nvmlDeviceGetPowerUsage, which on Hopper is averaged over about a second (what a plain
    # collector reads); both in mW.
    def read_instant() -> float:
        v = pynvml.nvmlDeviceGetFieldValues(h, [186])[0]
        return float(v.value.uiVal) / 1000.0 if v.nvmlReturn == 0 else float("nan")

    def sample_power(
        stop: threading.Event, inst: list[float], avg: list[float], every_s: float
    ) -> None:
        while not stop.is_set():
            inst.append(read_instant())
            avg.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            stop.wait(every_s)

    def dense_row(x, n: int, k: int, with_power: bool):
        m = x.shape[0]
        wt = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        flops = 2.0 * m * n * k
        est_s = max(flops / 7e14, 2.0 * (m * k + n * k + m * n) / 4.0e12, 5e-6)
        inner = int(min(max(0.004 / est_s, 1), 200))  # ~4 ms of work per graph replay
        for _ in range(3):
            torch.nn.functional.linear(x, wt)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(inner):
                torch.nn.functional.linear(x, wt)
        g.replay()
        torch.cuda.synchronize()
        reps = 5
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            g.replay()
        e.record()
        torch.cuda.synchronize()
        lat_ms = s.elapsed_time(e) / (reps * inner)
        power = power_avg = clock = ""
        if with_power:
            inst: list[float] = []
            avg: list[float] = []
            stop = threading.Event()
            # loop 0.4 s to settle (the averaged sensor lags by about a second), then sample
            for _ in range(max(int(0.4 / (lat_ms * inner / 1e3)), 1)):
                g.replay()
            torch.cuda.synchronize()
            th = threading.Thread(target=sample_power, args=(stop, inst, avg, 0.005))
            th.start()
            for _ in range(max(int(args.power_s / (lat_ms * inner / 1e3)), 1)):
                g.replay()
            torch.cuda.synchronize()
            stop.set()
            th.join()
            clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            inst = [v for v in inst if v == v]
            power = f"{sum(inst) / len(inst):.2f}" if inst else ""
            power_avg = f"{sum(avg) / len(avg):.2f}" if avg else ""
        del g, wt
        return lat_ms, power, power_avg, clock, inner

    def aic_row(x, n: int, k: int, with_power: bool):
        # Six weight copies, one x: the weights do not stay in L2 between calls.
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(6)]

        def kernel() -> None:
            for wt in ws:
                torch.nn.functional.linear(x, wt)

        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        runs = 6
        if with_power:
            torch.cuda.synchronize()
            s.record()
            for _ in range(3):
                kernel()
            e.record()
            torch.cuda.synchronize()
            it_s = s.elapsed_time(e) / 3 / 1e3
            target = 0.3 if it_s < 1e-4 else 1.0
            runs = min(max(runs, int(target / it_s) + 1), 3000)
        else:
            for _ in range(3):
                kernel()
            torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            kernel()
        torch.cuda.synchronize()
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        inst: list[float] = []
        avg: list[float] = []
        stop = threading.Event()
        th = threading.Thread(target=sample_power, args=(stop, inst, avg, 0.1))
        if with_power:
            th.start()
        s.record()
        for _ in range(runs):
            g.replay()
        e.record()
        torch.cuda.synchronize()
        power = power_avg = clock = ""
        if with_power:
            stop.set()
            th.join()
            clock = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            inst = [v for v in inst if v == v]
            power = f"{sum(inst) / len(inst):.2f}" if inst else ""
            power_avg = f"{sum(avg) / len(avg):.2f}" if avg else ""
        lat_ms = s.elapsed_time(e) / runs / 6
        ws.clear()
        del g
        return lat_ms, power, power_avg, clock, runs * 6

    # Warm the clocks once (the collector also runs back to back).
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    for _ in range(50):
        a @ a
    torch.cuda.synchronize()

    f = open(args.out, "w", newline="")  # noqa: SIM115 (flushed as rows come, closed at the end)
    w = csv.writer(f)
    w.writerow(
        [
            "device",
            "m",
            "n",
            "k",
            "set",
            "latency_ms",
            "power_w",
            "power_avg_w",
            "sm_mhz",
            "calls",
            "protocol",
        ]
    )
    done = 0
    for i, (m, n, k, kind) in enumerate(rows):
        if time.perf_counter() - t_start > args.budget_s:
            break
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        if args.protocol == "aic":
            lat_ms, power, power_avg, clock, inner = aic_row(x, n, k, i in power_idx)
        else:
            lat_ms, power, power_avg, clock, inner = dense_row(x, n, k, i in power_idx)
        del x
        w.writerow(
            [name, m, n, k, kind, f"{lat_ms:.6f}", power, power_avg, clock, inner, args.protocol]
        )
        done += 1
        if done % 50 == 0:
            f.flush()
            print(f"{done} rows, {time.perf_counter() - t_start:.0f} s", flush=True)
    torch.cuda.synchronize()
    time.sleep(1.0)
    idle = [pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0 for _ in range(20)]
    idle_i = [read_instant() for _ in range(20)]
    w.writerow(
        [
            name,
            "",
            "",
            "",
            "idle",
            "",
            f"{sum(idle_i) / 20:.2f}",
            f"{sum(idle) / 20:.2f}",
            "",
            "",
            "",
        ]
    )
    f.close()
    print(f"{done} of {len(rows)} rows in {time.perf_counter() - t_start:.0f} s on {name}")


if __name__ == "__main__":
    main()
