"""`dse gpus`: list the hardware registry."""

from __future__ import annotations

import argparse

from dse.hardware import get_gpu, gpu_names


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gpus",
        help="list the GPUs in the hardware registry",
        description="List the GPUs in the hardware registry with their spec-sheet numbers.\n\n"
        "example: dse gpus",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(command="gpus")


def run(args: argparse.Namespace) -> int:
    print(
        f"{'name':<15}{'bf16 TFLOP/s':>13}{'HBM TB/s':>10}{'HBM GB':>8}{'power W':>9}  measured power"
    )
    for name in gpu_names():
        g = get_gpu(name)
        print(
            f"{g.name:<15}{g.peak_bf16_flops_per_s / 1e12:>13.1f}{g.hbm_bw_bytes_per_s / 1e12:>10.2f}"
            f"{g.hbm_capacity_bytes / 1e9:>8.1f}{g.board_power_w:>9.0f}  {'yes' if g.measured_power else 'no'}"
        )
    return 0
