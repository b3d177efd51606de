"""`dse show STUDY_OR_RESULTS_DIR`: print a study's Pareto front as a table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

# Display scale and unit by objective unit (dse.spec.space.OBJECTIVE_UNITS); by column name first
# where one unit covers sizes of different magnitude (KV bytes per token in kB, memory in GB).
SCALE = {
    "s": (1e3, "ms"),
    "J": (1.0, "J"),
    "parameters": (1e-9, "B params"),
    "bytes": (1e-3, "kB"),
    "nats": (1.0, "nats/token"),
    "tokens/s/GPU": (1.0, "tokens/s/GPU"),
    "tokens/s": (1.0, "tokens/s"),
}
NAME_SCALE = {"memory_bytes": (1e-9, "GB")}


def display_scale(name: str) -> tuple[float, str]:
    """(factor, unit) to print objective column `name` in."""
    from dse.spec.space import objective_unit

    return NAME_SCALE.get(name) or SCALE.get(objective_unit(name), (1.0, ""))


def limit_scale(metric: str) -> tuple[float, str]:
    """(factor, unit) to print constrained metric `metric` (`dse.sweep.limits.UNITS`) in."""
    from dse.sweep.limits import UNITS

    return NAME_SCALE.get(metric) or SCALE.get(UNITS.get(metric, ""), (1.0, ""))


def limit_text(lim: Any) -> str:
    """'tpot <= 50 ms' for a `dse.sweep.limits.Limit`."""
    scale, unit = limit_scale(lim.metric)
    return f"{lim.metric} {lim.op} {lim.value * scale:.4g} {unit}".rstrip()


def broken_text(lim: Any, value: float) -> str:
    """'tpot 62 ms > 50 ms' (a limit broken, with the value); 'fits_memory: needs 1.3x the
    usable memory'."""
    if lim.metric == "fits_memory":
        return f"fits_memory: needs {value:.3g}x the GPU's usable memory"
    scale, unit = limit_scale(lim.metric)
    op = ">" if lim.bound == "max" else "<"
    return f"{lim.metric} {value * scale:.4g} {unit} {op} {lim.value * scale:.4g} {unit}"


# Shown beside the searched columns when they vary on the front (fixed ones are in the space).
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
        description="Print the feasible Pareto front of a sweep, one row per distinct "
        "configuration, sorted by the first objective: every searched parameter, how many "
        "trials hit the configuration, the knee point marked `*`, and `~` on points the "
        "predictor's error band cannot tell from a front neighbour; every constrained metric, "
        "with a line for each limit that never binds; and, when front rows lie outside a fitted "
        "range, how many and by which input (an `out of range` column names them per row). "
        "The argument is a results "
        "folder, a study name under results/, or (with --storage) a study in a database. "
        "--compare NAME places a catalogue model (`dse arch --list`) beside the front, "
        "evaluated with the space's workload and GPU, names any limit it breaks, and says "
        "whether the front dominates it. A results folder is checked as `dse report` checks it."
        "\n\nexamples:\n  dse show results/dense-8b\n  dse show dense-8b\n"
        "  dse show dense-8b --compare llama-3-8b\n"
        "  dse show big --storage postgresql://user@host/dse",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="STUDY_OR_RESULTS_DIR")
    p.add_argument("--storage", metavar="URL", help="read the study from this storage")
    p.add_argument("--limit", type=int, default=50, help="show at most this many rows (0: all)")
    p.add_argument(
        "--compare",
        metavar="MODEL",
        action="append",
        help="a catalogue model to place beside the front (repeatable), e.g. llama-3-8b",
    )
    p.set_defaults(command="show")


def _space(view: Any, args: argparse.Namespace) -> Any | None:
    """The search space of the study shown (from summary.json or the study's record)."""
    from dse.sweep.results import SUMMARY_FILE, read_summary, space_from_summary

    for folder in (Path(view.source), Path("results") / args.target):
        if (folder / SUMMARY_FILE).is_file():
            return space_from_summary(read_summary(folder))
    import optuna

    from dse.sweep.study_reader import open_for_reading
    from dse.sweep.study_record import StudyRecord, space_from_record

    study = optuna.load_study(study_name=view.name, storage=open_for_reading(view.source))
    return space_from_record(StudyRecord.from_attrs(study.user_attrs, view.source))


def _directions(space: Any) -> tuple[str, ...] | None:
    d = getattr(space.objectives, "directions", None) if space is not None else None
    return tuple(d) if d and "maximize" in d else None


def run(args: argparse.Namespace) -> int:

    from dse.sweep import load_front

    view = load_front(args.target, args.storage)
    f = view.front
    space = _space(view, args)
    print(f"study {view.name!r} ({view.source}): {len(f)} configurations on the front")
    if len(f):
        _print_front(view, space, args.limit)
    for name in args.compare or []:
        _print_compare(view, space, name)
    return 0


def _mark_column(view: Any) -> list[str]:
    f = view.front
    close = f["indistinguishable"].astype(bool).to_numpy() if "indistinguishable" in f else None
    out = []
    for i in range(len(f)):
        m = "*" if i == view.knee_row else ""
        if close is not None and close[i]:
            m += "~"
        out.append(m)
    return out


def tradeoff_lines(view: Any, space: Any | None = None) -> list[str]:
    """The front's trade-off in a few lines: the configuration best in each objective and the
    knee, each with every objective and every searched column (what `dse sweep` prints)."""
    f = view.front
    if not len(f):
        return []
    names = list(view.objectives)
    dirs = list(_directions(space) or ["minimize"] * len(names))
    searched = (
        [p.name for p in space.searched if p.name in f]
        if space is not None
        else [c for c in CONFIG_COLUMNS if c in f and f[c].nunique(dropna=True) > 1]
    )

    def describe(i: int) -> str:
        parts = []
        for n in names:
            scale, unit = display_scale(n)
            parts.append(f"{n} {float(f[f'obj.{n}'].iloc[i]) * scale:.4g} {unit}")
        config = ", ".join(f"{c}={f[c].iloc[i]}" for c in searched)
        return "; ".join(parts) + (f"  [{config}]" if config else "")

    rows: list[tuple[str, int]] = []
    for n, d in zip(names, dirs, strict=True):
        v = f[f"obj.{n}"].to_numpy(float)
        rows.append((f"best {n}", int(v.argmax() if d == "maximize" else v.argmin())))
    if view.knee_row is not None:
        rows.append(("knee", int(view.knee_row)))
    width = max(len(label) for label, _ in rows)
    return [f"  {label:<{width}}  {describe(i)}" for label, i in rows]


def _print_front(view: Any, space: Any, limit: int) -> None:
    import pandas as pd

    from dse.sweep import extrapolation as X
    from dse.sweep import limits as L

    f = view.front
    out = pd.DataFrame({"": _mark_column(view)})
    out["trial"] = f["number"].to_numpy()
    if "trials" in f:
        out["trials"] = f["trials"].to_numpy()
    for name in view.objectives:
        scale, unit = display_scale(name)
        out[f"{name} [{unit}]"] = f[f"obj.{name}"].to_numpy(float) * scale
    # Every searched column, constant on the front or not (a constant GPU or tensor_parallel
    # is why a point is fast), then other configuration columns that vary on the front.
    searched = [p.name for p in space.searched] if space is not None else []
    moe = "n_experts" in f and (f["n_experts"].fillna(1) > 1).any()
    extra = [
        c
        for c in CONFIG_COLUMNS
        if c in f
        and c not in searched
        and (moe or c not in ("top_k", "d_ff_expert"))
        and f[c].nunique(dropna=True) > 1
    ]
    for c in [*searched, *extra]:
        if c in f:
            out[c] = f[c].to_numpy()
    if "active_params" in f:
        out["active [B]"] = f["active_params"].to_numpy(float) / 1e9
    # Every constrained metric (an active_params limit is the column above).
    lims = L.limits(space.constraints) if space is not None else []
    for lim in lims:
        if lim.metric != "active_params":
            scale, unit = limit_scale(lim.metric)
            out[f"{lim.metric} [{unit}]"] = L.values(f, lim) * scale
    # The inputs out of range per row; those on every row alike go in the line under the table.
    texts, common = X.row_texts(f)
    if any(texts):
        out["out of range"] = texts
    laws = f["loss_law"].dropna().astype(str) if "loss_law" in f else []
    laws = sorted({v for v in laws if v})
    if len(laws) > 1:  # `loss: {source: auto}` priced the front with more than one law
        out["loss law"] = f["loss_law"].to_numpy()
    shown = len(out) if limit <= 0 else limit
    # Text read left to right: the out-of-range column left-aligned.
    width = max((len(t) for t in texts), default=0)
    left = {"out of range": lambda v: f"{v:<{width}}"} if any(texts) else None
    with pd.option_context("display.width", 250, "display.max_columns", 60):
        print(
            out.head(shown).to_string(
                index=False, float_format=lambda v: f"{v:.4g}", formatters=left
            )
        )
    if len(out) > shown:
        print(f"... {len(out) - shown} more (--limit 0 shows all)")
    if view.knee_row is not None:
        print("* knee point (farthest from the line between the extremes, normalised)")
    if len(laws) == 1:
        print(f"loss law: {laws[0]} (docs/quality.md)")
    if "indistinguishable" in f and f["indistinguishable"].astype(bool).any():
        print(
            "~ indistinguishable: a front neighbour (next in the first objective) lies inside "
            "this point's predicted error band in every objective, or this one inside its"
        )
    if "trials" in f and (f["trials"] > 1).any():
        print("trials: how many trials of the study hit the configuration (predicted once)")
    oor = X.summarise(f).line()
    if oor:  # silent when every front row is inside the fitted ranges
        print(oor)
        if common:
            print(f"  on every front row: {', '.join(common)} (x value / bound)")
        if any(texts):
            print(
                "  out of range: the row's inputs outside the fitted range, x value / bound"
                + (" (besides those on every row)" if common else "")
                + "; pred.out_of_range_inputs and loss_out_of_range_inputs hold them all"
            )
    for lim in lims:
        _print_binding(view, lim)


def _print_binding(view: Any, lim: Any) -> None:
    """Says when a limit never binds: lifting it would leave the front as it is."""
    import numpy as np

    from dse.sweep import limits as L

    if view.trials is None:
        return
    b = L.binding(view.trials, lim, view.front, view.objectives, view.directions)
    if b.binds:
        return
    v = L.values(view.front, lim)
    v = v[np.isfinite(v)]
    scale, unit = limit_scale(lim.metric)
    edge = ""
    if len(v):
        top = float(v.max() if lim.bound == "max" else v.min())
        edge = f"front {lim.bound} {top * scale:.4g} {unit}; "
    why = (
        "no trial broke it"
        if not b.broke
        else f"{b.broke} trial{'s' if b.broke > 1 else ''} broke it, none would join the front"
    )
    print(f"{limit_text(lim)} never binds: {edge}{why}")


def _print_compare(view: Any, space: Any, name: str) -> None:
    import pandas as pd

    from dse.errors import ConfigError
    from dse.sweep import catalogue as K
    from dse.sweep import limits as L

    if space is None:
        raise ConfigError(f"--compare {name}: the study's search space is not recorded")
    placed = K.place(space, name, view.front, _directions(space))
    if not placed.fits:
        raise ConfigError(
            f"--compare {name}: {placed.name} does not fit the space's fixed fields ("
            + "; ".join(placed.mismatches)
            + ")"
        )
    assert placed.table is not None and placed.dominated_by is not None
    t = placed.table
    print(
        f"\n{placed.name} (catalogue), evaluated like a trial with the space's workload, GPU "
        "and constraints:"
    )
    if placed.outside:
        print(f"  outside the searched values: {', '.join(placed.outside)}")
    out = pd.DataFrame()
    varying = [p.name for p in space.searched if p.name in t and p.name not in K.C.ARCH_FIELDS]
    for c in varying:
        out[c] = t[c].to_numpy()
    for n in view.objectives:
        scale, unit = display_scale(n)
        out[f"{n} [{unit}]"] = t[f"obj.{n}"].to_numpy(float) * scale
    if "active_params" in t:
        out["active [B]"] = t["active_params"].to_numpy(float) / 1e9
    # The limits a placement breaks, each with its value (invalid ones say so in `front`).
    broke = L.broken(t, space.constraints)
    out["feasible"] = [
        "yes" if ok else "no" + (": " + "; ".join(broken_text(*b) for b in bs) if bs else "")
        for ok, bs in zip(t["feasible"].astype(bool), broke, strict=True)
    ]
    numbers = view.front["number"].to_numpy() if len(view.front) else []
    verdicts = []
    for i, d in enumerate(placed.dominated_by):
        if not bool(t["valid"].iloc[i]) if "valid" in t else False:
            verdicts.append("invalid")
        elif d < 0:
            verdicts.append("not dominated: it would join the front")
        else:
            j = int(list(numbers).index(d))
            gains = []
            for n in view.objectives:
                a, b = float(view.front[f"obj.{n}"].iloc[j]), float(t[f"obj.{n}"].iloc[i])
                if b != 0 and a != b:
                    gains.append(f"{(a - b) / abs(b):+.0%} {n}")
            verdicts.append(f"dominated by trial {d} ({', '.join(gains)})")
    out["front"] = verdicts
    with pd.option_context("display.width", 250, "display.max_columns", 60):
        print(out.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    n_dom = int((placed.dominated_by >= 0).sum())
    print(
        f"the front dominates {placed.name} at {n_dom} of {len(t)} placement"
        + ("s" if len(t) > 1 else "")
    )
