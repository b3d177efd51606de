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
        "surrogates/<gpu>/ (manifest.json + weights.npz). Deterministic for a given --seed. "
        "Rows faster than their physical floor are left out and counted (manifest "
        "`implausible_rows`); a table with too few rows to fit is named with its row count and "
        "the minimum (a WARNING line; manifest `skipped_tables`). Measured power rows that "
        "follow the previous row of their file more than their own work (carry-over) are left "
        "out of the power fit and counted per table (manifest `models.power.carryover`: "
        "rows, rows_flagged, rule, noise_floor_pct; docs/accuracy.md 'Carry-over').\n\n"
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
        help="fit only this family (repeatable); other models of the existing artifact are kept. "
        "Levels 2-3 (family hymell-levels-2-3) are fitted on the whole Level 1, kept models "
        "included; add it whenever a Level-1 family is refitted",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="NAME",
        dest="models",
        help="with --only: refit only this model of the family (repeatable, e.g. --only moe "
        "--model moe.trtllm.bfloat16); the family's other models of the existing artifact are "
        "kept as they are",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS/OpenMP threads of every model's fit (default 1: its small solves gain nothing from more; 2 on a dedicated 2-core machine for the tree fits)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="processes fitting the GEMM, attention and MoE tables at once, one thread each "
        "(default 1; the artifact is the same for any value: each table's fit is seeded by "
        "itself; e.g. --jobs 2 on a 2-core machine)",
    )
    p.add_argument(
        "--band-coverage",
        action="store_true",
        help="also measure each kernel band's coverage on held-out layouts (nested CV: about "
        "folds x the CV's fits again; docs/accuracy.md, 'The band')",
    )
    p.add_argument(
        "--bands-only",
        action="store_true",
        help="refit nothing: calibrate the kernel bands of the artifact at --out (default: the "
        "shipped one) by rerunning each family's CV, measure their held-out coverage, and "
        "rewrite its manifest.json only (weights and artifact id unchanged); --only limits the "
        "families",
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
    from dse.fitting.run import fit_artifact
    from dse.models.artifact import Artifact, default_dir

    gpu = args.gpu.strip().lower()
    # default: $DSE_SURROGATES/<gpu> (else the shipped folder), where `dse predict` looks
    out = Path(args.out) if args.out else default_dir(gpu)
    if args.bands_only:
        return bands_only(args, out)
    profiled = profile_spec(args.data, gpu)
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
        models=args.models,
        threads=args.threads,
        cv=args.cv,
        jobs=args.jobs,
        band_coverage=args.band_coverage,
    )
    path = art.save(out)
    if profiled is not None:
        # the artifact carries its GPU's spec: `dse gpus`, `dse predict --gpu` and sweeps
        # find the GPU through it (DSE_SURROGATES pointing at the folder above)
        import shutil

        from dse.spec.hardware import SPEC_FILE

        shutil.copyfile(profiled, path / SPEC_FILE)
    carried = art.manifest.get("carried_over") or []
    if carried:
        print(f"kept from the previous artifact (no family refitted them): {', '.join(carried)}")
    print(f"wrote {path} (artifact {art.artifact_id}, {len(art.models)} models)")
    stale = stale_levels_note(args.only, carried)
    if stale:
        print(stale)
    return 0


def bands_only(args: argparse.Namespace, out: Path) -> int:
    """`dse fit --bands-only`: the bands of the artifact at `out`, calibrated and measured on
    held-out layouts, written into its manifest; a GH200-style artifact reuses the bands of the
    identical Level-1 models of its `level1_gpu` artifact beside it."""
    from dse.errors import ArtifactError
    from dse.fitting.band_calibration import apply_bands, calibrate_artifact
    from dse.models.artifact import Artifact

    art = Artifact.load(out)
    reuse = None
    if art.level1_gpu != art.gpu and (out.parent / art.level1_gpu / "manifest.json").is_file():
        try:
            reuse = Artifact.load(out.parent / art.level1_gpu)
        except ArtifactError as exc:
            print(f"dse fit: {art.level1_gpu} artifact not reused ({exc})")
    entries = calibrate_artifact(
        args.data, art, only=args.only, jobs=args.jobs, log=print, reuse=reuse
    )
    apply_bands(art, entries)
    path = art.save_manifest(out)
    print(f"wrote the bands of {len(entries)} models into {path} (artifact {art.artifact_id})")
    return 0


def profile_spec(data: str, gpu: str) -> Path | None:
    """The gpu.yaml of a `dse profile` folder when `gpu` is not a shipped registry GPU (None
    otherwise); a profile of another GPU given to --gpu is a ConfigError naming both."""
    from dse.errors import ConfigError
    from dse.spec.hardware import SPEC_FILE, _registry, load_spec

    path = Path(data) / SPEC_FILE
    if not path.is_file():
        return None
    spec = load_spec(path)
    if spec.name != gpu:
        raise ConfigError(
            f"{data} is a profile of GPU {spec.name!r} (its {SPEC_FILE}), not {gpu!r}; "
            f"fit it with --gpu {spec.name}"
        )
    return None if gpu in _registry() else path


def stale_levels_note(only: list[str] | None, carried: list[str]) -> str:
    """A warning when `--only` refitted Level-1 families but carried Levels 2-3 over: those were
    fitted on the previous Level-1 models (their residuals would correct errors the new models
    may no longer make)."""
    from dse.fitting.artifacts import LEVEL_PREFIXES
    from dse.fitting.level3 import FAMILY

    if not only or FAMILY in only:
        return ""
    kept_levels = [n for n in carried if n.startswith(LEVEL_PREFIXES)]
    if not kept_levels:
        return ""
    return (
        f"note: Levels 2-3 ({', '.join(kept_levels)}) were kept, fitted on the previous Level-1 "
        f"models; refit them on the new ones with --only {' --only '.join(only)} "
        f"--only {FAMILY}"
    )
