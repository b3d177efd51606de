"""`dse show STUDY_OR_RESULTS_DIR`: print a study's Pareto front as a table."""

from __future__ import annotations

import argparse

SCALE = {"s": (1e3, "ms"), "J": (1.0, "J"), "parameters": (1e-9, "B params"), "bytes": (1e-3, "kB")}
CONFIG_COLUMNS = (
    "gpu",
    "batch_size",
    "d_model",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_ff",
    "n_experts",
    "top_k",
    "d_ff_expert",
    "vocab_size",
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "show",
        help="print a study's Pareto front",
        description="Print the feasible Pareto front of a sweep, sorted by the first objective, "
        "with the knee point marked `*`. The argument is a results folder, a study name under "
        "results/, or (with --storage) a study in a database.\n\n"
        "examples:\n  dse show results/dense-8b\n  dse show dense-8b\n"
        "  dse show big --storage postgresql://user@host/dse",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="STUDY_OR_RESULTS_DIR")
    p.add_argument("--storage", metavar="URL", help="read the study from this storage")
    p.add_argument("--limit", type=int, default=50, help="show at most this many rows (0: all)")
    p.set_defaults(command="show")


def run(args: argparse.Namespace) -> int:
    import pandas as pd

    from dse.sweep import load_front
    from dse.sweep._evaluate import objective_unit

    view = load_front(args.target, args.storage)
    f = view.front
    print(f"study {view.name!r} ({view.source}): {len(f)} configurations on the front")
    if not len(f):
        return 0
    out = pd.DataFrame({"": ["*" if i == view.knee_row else "" for i in range(len(f))]})
    out["trial"] = f["number"].to_numpy()
    for name in view.objectives:
        scale, unit = SCALE.get(objective_unit(name), (1.0, ""))
        out[f"{name} [{unit}]"] = f[f"obj.{name}"].to_numpy(float) * scale
    moe = "n_experts" in f and (f["n_experts"].fillna(1) > 1).any()
    shown = [c for c in CONFIG_COLUMNS if c in f and (moe or c not in ("top_k", "d_ff_expert"))]
    varying = [c for c in shown if f[c].nunique(dropna=True) > 1] if len(f) > 1 else shown
    for c in varying:
        out[c] = f[c].to_numpy()
    if "active_params" in f:
        out["active [B]"] = f["active_params"].to_numpy(float) / 1e9
    limit = len(out) if args.limit <= 0 else args.limit
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(out.head(limit).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if len(out) > limit:
        print(f"... {len(out) - limit} more (--limit 0 shows all)")
    if view.knee_row is not None:
        print("* knee point (farthest from the line between the extremes, normalised)")
    return 0
