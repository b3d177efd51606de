"""`dse gpus`: list the hardware registry."""

from __future__ import annotations

import argparse
import math

from dse.spec.hardware import get_gpu, gpu_names, profiled_names


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gpus",
        help="list the GPUs in the hardware registry",
        description="List the GPUs in the hardware registry with their spec-sheet numbers, and "
        "the GPUs fitted from a `dse profile` (artifact folders with a gpu.yaml under "
        "$DSE_SURROGATES, or the shipped surrogates/), marked 'profiled'.\n\n"
        "example: dse gpus",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command="gpus")


def run(args: argparse.Namespace) -> int:
    profiled = set(profiled_names())
    print(
        f"{'name':<15}{'bf16 TFLOP/s':>13}{'HBM TB/s':>10}{'HBM GB':>8}{'power W':>9}  measured power"
    )
    for name in gpu_names():
        g = get_gpu(name)
        power = "n/a" if math.isnan(g.board_power_w) else f"{g.board_power_w:.0f}"
        note = "  (profiled: measured peaks, see its gpu.yaml)" if name in profiled else ""
        print(
            f"{g.name:<15}{g.peak_bf16_flops_per_s / 1e12:>13.1f}{g.hbm_bw_bytes_per_s / 1e12:>10.2f}"
            f"{g.hbm_capacity_bytes / 1e9:>8.1f}{power:>9}  {'yes' if g.measured_power else 'no'}{note}"
        )
    return 0
