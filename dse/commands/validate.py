"""`dse validate`: score the frozen artifacts against measured data (the accuracy contract)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="score the frozen predictor against measured data",
        description="Predict every measured row found in DIR with the frozen artifacts and print "
        "MAPE per (source, gpu, engine, kind, dtype), with row counts and the rows that could "
        "not be predicted. Rows the fit saw score in-sample; the accuracy claim is the "
        "cross-validated error in each artifact's manifest (docs/accuracy.md). band%: how often "
        "the band of the model that priced the table held on layouts it was not calibrated on "
        "(`dse fit --bands-only`; - where not measured); in band%: the share of this table's "
        "rows inside their band (in-sample for rows the fit saw).\n\n"
        "example: dse validate --data ../shared/data --gpu h100_sxm --json accuracy.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="measured-data folder (layout of ../shared/data)")
    p.add_argument("--gpu", action="append", help="only this GPU (repeatable; default: all)")
    p.add_argument("--kind", action="append", help="only this data kind (repeatable)")
    p.add_argument("--artifacts", help="folder holding <gpu>/ artifacts (default: shipped ones)")
    p.add_argument("--json", dest="json_path", help="also write the results as JSON here")
    p.set_defaults(command="validate")


def run(args: argparse.Namespace) -> int:
    from dse.errors import ArtifactError
    from dse.fitting.validate import format_table, validate
    from dse.models.artifact import Artifact

    artifacts = None
    if args.artifacts:
        artifacts = {}
        for d in sorted(Path(args.artifacts).iterdir()):
            if (d / "manifest.json").is_file():
                try:
                    artifacts[d.name] = Artifact.load(d)
                except ArtifactError as exc:
                    print(f"dse validate: {exc}", file=sys.stderr)
    report = validate(
        args.data,
        gpus=args.gpu,
        artifacts=artifacts,
        kinds=args.kind,
        log=lambda s: print(s, file=sys.stderr),
    )
    print(format_table(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json_path}")
    return 0
