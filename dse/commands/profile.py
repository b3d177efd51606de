"""`dse profile`: measure a GPU (or the CPU) and write tables `dse fit` reads."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    from dse.profile.grid import OPS

    p = sub.add_parser(
        "profile",
        help="measure a GPU's primitives into tables `dse fit` reads",
        description="Time GEMM, prefill/decode attention, MoE, layer ops (and all-reduce with "
        "more than one GPU) over a grid of shapes with PyTorch, read energy from NVML, and "
        "write them in the layout of ../shared/data plus profile.json (device, software, "
        "protocol) and gpu.yaml (the GPU spec `dse fit --gpu NAME` needs, with the fastest "
        "rates each kernel kind reached, its `kernel_peaks`: the physical floors of that "
        "kind's rows). Resumable: rerun "
        "the same command to continue an interrupted or budget-cut profile. Needs "
        "`pip install dse[profile]` (torch, nvidia-ml-py). docs/profile.md has the protocol.\n\n"
        "examples:\n"
        "  dse profile --out prof/l40s --quick\n"
        "  dse profile --out prof/cpu --device cpu --quick --name cputest\n"
        "  dse fit --data prof/cpu --gpu cputest --out artifacts/cputest --only gemm",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", required=True, help="profile folder (created; resumed if it exists)")
    p.add_argument("--device", default="cuda:0", help="cuda, cuda:N or cpu (default cuda:0)")
    p.add_argument(
        "--ops",
        default=",".join(OPS),
        help=f"comma-separated op families (default all: {','.join(OPS)})",
    )
    p.add_argument(
        "--dtype",
        default="bfloat16",
        help="comma-separated compute dtypes: bfloat16, float16, fp8 (fp8: GEMM only; "
        "default bfloat16)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small grid: a few minutes on a GPU, well under a minute on a CPU",
    )
    p.add_argument(
        "--max-minutes",
        type=float,
        help="measure only the shapes the estimate fits in this budget (the rest on a rerun)",
    )
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        choices=(0, 1),
        help="1: the grid's geometric midpoints, shapes a default run does not measure "
        "(score an artifact with `dse validate --data` on it)",
    )
    p.add_argument(
        "--name",
        help="GPU name for the tables and `dse fit --gpu` (default: the registry name of the "
        "device, else a slug of it; 'cpu' on a CPU)",
    )
    p.add_argument(
        "--energy-seconds",
        type=float,
        default=1.0,
        help="sustained loop per shape for the NVML energy reading (default 1.0 s; GPU only)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="CPU only: intra-op threads (default 1: stable timings on shared cores)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(command="profile")


def run(args: argparse.Namespace) -> int:
    from dse.profile.run import ProfileOptions, run_profile

    def split(text: str) -> tuple[str, ...]:
        return tuple(x.strip().lower() for x in str(text).split(",") if x.strip())

    run_profile(
        ProfileOptions(
            out=Path(args.out),
            device=args.device,
            ops=split(args.ops),
            dtypes=split(args.dtype),
            quick=args.quick,
            max_minutes=args.max_minutes,
            offset=args.offset,
            name=args.name,
            energy_s=args.energy_seconds,
            threads=args.threads,
            progress=not args.no_progress,
        )
    )
    return 0
