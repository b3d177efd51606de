"""All-reduce timing over `torch.distributed`: one process per GPU (NCCL), or per CPU process
(gloo, what the tests run), each group size a power of two up to the devices visible.

Every rank runs the same fixed schedule (warm-up, then `SAMPLES` samples of `calls` back-to-back
all-reduces, `calls` sized from the first timed call on rank 0 and broadcast), because a
per-rank stop rule would leave ranks waiting on collectives the others never start. Rank 0's
clock is the row's latency (CUDA events on a GPU); rank 0 sends the rows back on a queue.
"""

from __future__ import annotations

import math
import socket
from queue import Empty
from typing import Any

import numpy as np

WARMUP = 5
SAMPLES = 15
MIN_SAMPLE_S = 2e-4


def group_sizes(n_devices: int) -> list[int]:
    """2, 4, 8, ... up to the devices visible."""
    return [2**e for e in range(1, int(math.log2(max(n_devices, 1))) + 1)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(
    rank: int,
    world: int,
    port: int,
    backend: str,
    shapes: list[dict[str, Any]],
    dtype: str,
    queue: Any,
) -> None:
    import torch
    import torch.distributed as dist

    from dse.profile.ops import torch_dtype
    from dse.profile.timing import Clock

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    clock = Clock(torch, device)
    groups = {n: dist.new_group(list(range(n))) for n in sorted({s["num_gpus"] for s in shapes})}
    dt = torch_dtype(torch, dtype)
    for s in shapes:
        n, g = s["num_gpus"], groups[s["num_gpus"]]
        if rank < n:
            x = torch.ones(s["message_elements"], dtype=dt, device=device)

            def fn(x: Any = x, g: Any = g) -> None:
                dist.all_reduce(x, group=g)

            for _ in range(WARMUP):
                fn()
            clock.sync()
            first = clock.time(fn, 1)
            calls = torch.tensor([max(1, min(100, math.ceil(MIN_SAMPLE_S / max(first, 1e-9))))])
            dist.broadcast(calls, src=0, group=g)  # the same schedule on every rank
            c = int(calls.item())
            t = np.array([clock.time(fn, c) / c for _ in range(SAMPLES)])
            if rank == 0:
                queue.put(
                    {
                        **s,
                        "dtype": dtype,
                        "kernel_source": backend,
                        "latency_s": float(np.median(t)),
                        "latency_mean_s": float(t.mean()),
                        "latency_std_s": float(t.std(ddof=1)),
                        "latency_min_s": float(t.min()),
                        "latency_max_s": float(t.max()),
                        "repeats": SAMPLES,
                        "calls": c,
                        "ci_rel_halfwidth": float("nan"),
                        "power_w": float("nan"),
                        "energy_seconds": float("nan"),
                    }
                )
        dist.barrier()
    if rank == 0:
        queue.put(None)
    dist.destroy_process_group()


def measure_allreduce(
    shapes: list[dict[str, Any]], dtype: str, backend: str = "nccl"
) -> list[dict[str, Any]]:
    """Rows of every (num_gpus, message_elements) shape, one process per device."""
    import torch.multiprocessing as mp

    world = max(s["num_gpus"] for s in shapes)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = mp.spawn(
        _worker, args=(world, _free_port(), backend, shapes, dtype, queue), nprocs=world, join=False
    )
    rows: list[dict[str, Any]] = []
    while True:
        try:
            r = queue.get(timeout=1.0)
        except Empty:
            # a worker that died raises here (ProcessRaisedException / ProcessExitedException)
            if procs.join(timeout=0):
                break
            continue
        if r is None:
            break
        rows.append(r)
    procs.join()
    return rows
