"""`dse check SPACE.yaml`: validate a search space, count its configurations, show examples."""

from __future__ import annotations

import argparse

import numpy as np

from dse.spec.space import count_feasible, load_space, require_feasible
from dse.sweep.space_index import canonical_index


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="validate a search-space YAML and count its configurations",
        description="Validate a search-space YAML file: report every mistake with its file, line "
        "and key (and warn, on stderr, about a constraint limit outside its metric's plausible "
        "range, with its unit), count the configurations, how many are valid architectures (the "
        "others counted by the rule they break) and how many satisfy the constraints, and print "
        "a few examples.\n\nexample: dse check search_spaces/dense_8b.yaml",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("space", help="path to the search-space YAML file")
    p.add_argument(
        "--examples", type=int, default=3, help="how many example configurations to print"
    )
    p.set_defaults(command="check")


# Rules listed under "valid architectures" (the most common first); the rest are summed.
SHOWN_RULES = 5


def _print_invalid(invalid: dict[str, int]) -> None:
    """Why configurations are not valid architectures: each broken rule (with its values) and
    how many configurations break it first."""
    if not invalid:
        return
    items = list(invalid.items())
    print(f"    {sum(invalid.values()):,} invalid, by the first rule each breaks:")
    for msg, n in items[:SHOWN_RULES]:
        print(f"    {n:>10,}  {msg}")
    rest = items[SHOWN_RULES:]
    if rest:
        print(f"    {sum(n for _, n in rest):>10,}  ... {len(rest)} more rules and values")


def run(args: argparse.Namespace) -> int:
    space = load_space(args.space)
    count = count_feasible(space)
    print(f"{space.source}: search space {space.name!r} is valid")
    searched = ", ".join(f"{p.name} ({len(p.values)})" for p in space.searched) or "none"
    print(f"  searched parameters: {searched}")
    print(f"  configurations:      {count.total:,}")
    if count.valid is not None:
        # rows that differ from an earlier one only in fields they ignore (`dse.spec.inert`)
        idx = np.arange(count.total, dtype=np.int64)
        repeats = int((canonical_index(space, idx) != idx).sum())
        if repeats:
            print(
                f"  distinct:            {count.total - repeats:,} ({repeats:,} differ from "
                "another only in fields they ignore: a sweep counts them once)"
            )
    if count.valid is None:
        print("  feasible:            not counted (too many to enumerate)")
    else:
        print(f"  valid architectures: {count.valid:,} of {count.total:,}")
        _print_invalid(count.invalid)
        static = "static constraint" if space.predicted_constraints else "constraint"
        print(f"  feasible:            {count.feasible:,} (satisfy every {static})")
        for name, n in count.violations.items():
            print(f"    ruled out by {name}: {n:,}")
        require_feasible(space, count)
    if space.predicted_constraints:  # need predictions: not in the counts above
        names = ", ".join(space.predicted_constraints)
        print(f"  predicted limits:    {names} (checked per configuration during the sweep)")
    o = space.objectives
    ways = ", ".join(f"{n} ({d[:3]})" for n, d in zip(o.names, o.directions, strict=True))
    print(f"  objectives:          {ways}")
    s = space.study
    # exact and exhaustive price every configuration once: their budget is the space
    trials = "every configuration" if s.sampler in ("exact", "exhaustive") else s.trials
    print(f"  study:               sampler={s.sampler} trials={trials} seed={s.seed}")
    for i, ex in enumerate(space.examples(args.examples), 1):
        print(f"  example {i}: " + " ".join(f"{k}={v}" for k, v in ex.items()))
    return 0
