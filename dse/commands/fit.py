"""`dse fit`: fit the frozen predictor artifact of one GPU from measured data."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fit",
        help="fit the frozen predictor artifact of one GPU from measurements",
        description="Fit every registered model family (GEMM, power, and whatever else is "
        "registered) for one GPU, cross-validate by held-out shape groups and write "
        "surrogates/<gpu>/ (manifest.json + weights.npz). Deterministic for a given --seed.\n\n"
        "example: dse fit --data ../shared/data --gpu h100_sxm",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="measured-data folder (layout of ../shared/data)")
    p.add_argument("--gpu", required=True, help="registry name, e.g. h100_sxm (see `dse gpus`)")
    p.add_argument("--out", help="folder to write (default: the shipped surrogates/<gpu>/)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--only",
        action="append",
        metavar="FAMILY",
        help="fit only this family (repeatable); other models of the existing artifact are kept",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS/OpenMP threads for the tree fits (default 1; 2 on a dedicated 2-core machine)",
    )
    p.add_argument(
        "--no-cv",
        dest="cv",
        action="store_false",
        help="skip cross-validation (quick refit; the manifest then has no held-out errors)",
    )
    p.set_defaults(command="fit")


def run(args: argparse.Namespace) -> int:
    from dse.errors import ArtifactError
    from dse.surrogate.artifact import Artifact, default_dir
    from dse.surrogate.fit import fit_artifact

    gpu = args.gpu.strip().lower()
    out = Path(args.out) if args.out else default_dir(gpu)
    keep = None
    if (out / "manifest.json").is_file():
        try:
            keep = Artifact.load(out)
        except ArtifactError as exc:
            print(f"dse fit: existing artifact at {out} not kept ({exc})")
    art = fit_artifact(
        args.data,
        gpu,
        seed=args.seed,
        only=args.only,
        keep=keep,
        threads=args.threads,
        cv=args.cv,
    )
    path = art.save(out)
    carried = art.manifest.get("carried_over") or []
    if carried:
        print(f"kept from the previous artifact (no family refitted them): {', '.join(carried)}")
    print(f"wrote {path} (artifact {art.artifact_id}, {len(art.models)} models)")
    return 0
