"""`dse fit --bands-only`: the kernel bands of an existing artifact, calibrated on held-out
layouts and their coverage measured (`dse.fitting.bands`), by rerunning each family's own
cross-validation (`Family.band_tables`) without refitting any model: the weights and the
artifact id stay as they are, the manifest gains `models.<name>.band` for every Level-1 and
Level-2 model with held-out residuals.

    art = Artifact.load("surrogates/h100_sxm")
    entries = calibrate_artifact("../shared/data", art, jobs=2)   # name -> band entry
    apply_bands(art, entries)
    art.save_manifest("surrogates/h100_sxm")

A GH200 artifact's Level-1 models are H200's (`Artifact.level1_gpu`): their tables are H200's
rows, and `reuse` (an artifact holding the same models) hands over bands already measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dse.errors import DataError
from dse.fitting import bands
from dse.fitting.context import FitContext
from dse.fitting.cv import map_tasks
from dse.fitting.families import Family, families
from dse.models.artifact import Artifact

# The kinds the families' band tables read (loaded once, before the worker processes start).
BAND_KINDS = (
    "gemm",
    "layer_op",
    "softmax",
    "layernorm",
    "gelu",
    "allreduce",
    "context_attention",
    "generation_attention",
    "moe",
)
# Families in the order their tables are handed to the worker processes: the slowest first
# (attention: an MLP ensemble per fit), so the pool does not end waiting on one of them.
COST_ORDER = ("attention", "gemm", "moe", "hymell-levels-2-3", "allreduce", "layer_op")


def band_context(
    data_root: str | Path, artifact: Artifact, jobs: int = 1, log: Callable[[str], None] = print
) -> FitContext:
    """The context a family's band tables read: the data, the artifact (`keep`), its seed,
    and as GPU the chip its Level-1 models were measured on (`Artifact.level1_gpu`)."""
    root = Path(data_root).resolve()
    if not root.is_dir():
        raise DataError(f"{data_root}: data folder not found")
    seed = int(artifact.manifest.get("seed", 0) or 0)
    return FitContext(root, artifact.level1_gpu, seed, log=log, keep=artifact, jobs=jobs)


def same_model(a: Artifact, b: Artifact, name: str) -> bool:
    """True where both artifacts hold model `name` with identical arrays."""
    if not (a.has(name) and b.has(name)):
        return False
    x, y = a.models[name], b.models[name]
    return set(x) == set(y) and all(np.array_equal(x[k], y[k]) for k in x)


def calibrate_artifact(
    data_root: str | Path,
    artifact: Artifact,
    only: Iterable[str] | None = None,
    nested: bool = True,
    jobs: int = 1,
    log: Callable[[str], None] = print,
    reuse: Artifact | Sequence[Artifact] | None = None,
) -> dict[str, dict[str, Any]]:
    """Model name -> band entry (`Band.to_entry`, with the held-out coverage when `nested`)
    for every model of `artifact` a family has a band table for (`only`: those families).
    Models an artifact of `reuse` holds identically, with a band measured as asked (held-out
    coverage when `nested`), take that band as it is (`artifact` itself: resume a run)."""
    lenders = [reuse] if isinstance(reuse, Artifact) else list(reuse or [])
    ctx = band_context(data_root, artifact, jobs, log)
    fams = [f for f in families() if f.band_tables is not None]
    if only is not None:
        wanted = set(only)
        fams = [f for f in fams if f.name in wanted]
    if jobs > 1:
        for kind in BAND_KINDS:
            ctx.table(kind)  # read once here: the worker processes get the tables with `ctx`
    out: dict[str, dict[str, Any]] = {}
    tasks: list[tuple[str, int, bool]] = []
    for fam in sorted(fams, key=_cost_rank):
        for i, table in enumerate(_tables(fam, ctx)):
            lender = next((a for a in lenders if _reusable(a, artifact, table.name, nested)), None)
            if lender is not None:
                out[table.name] = dict(lender.manifest["models"][table.name]["band"])
                log(f"{table.name}: band of {lender.gpu}'s identical model ({lender.artifact_id})")
            else:
                tasks.append((fam.name, i, nested))
    for name, entry in map_tasks(ctx, _calibrate_task, tasks):
        out[name] = entry
    return out


def _reusable(lender: Artifact, artifact: Artifact, name: str, nested: bool) -> bool:
    band = lender.band(name)
    ok = band is not None and (band.held_out is not None or not nested)
    return ok and same_model(artifact, lender, name)


def apply_bands(artifact: Artifact, entries: Mapping[str, Mapping[str, Any] | None]) -> None:
    """Record the bands in the artifact's manifest (in place); None removes a model's band."""
    recorded = artifact.manifest["models"]
    for name, entry in entries.items():
        if name not in recorded:
            continue
        if entry is None:
            recorded[name].pop("band", None)
        else:
            recorded[name]["band"] = dict(entry)


def _cost_rank(fam: Family) -> tuple[int, str]:
    return (COST_ORDER.index(fam.name) if fam.name in COST_ORDER else len(COST_ORDER), fam.name)


def _tables(fam: Family, ctx: FitContext) -> list[bands.BandTable]:
    assert fam.band_tables is not None
    return fam.band_tables(ctx)


def _calibrate_task(
    ctx: FitContext, family: str, index: int, nested: bool
) -> tuple[str, dict[str, Any] | None]:
    """One table's band (a task of `map_tasks`: the family's tables rebuilt in the worker)."""
    from threadpoolctl import threadpool_limits

    fam = next(f for f in families() if f.name == family)
    table = _tables(fam, ctx)[index]
    t0 = time.perf_counter()
    with threadpool_limits(1):  # small fits: BLAS threads only contend
        band = bands.calibrate(table, nested=nested)
    ctx.log(f"{table.name}: {describe(band)} ({time.perf_counter() - t0:.0f} s)")
    if band is None:
        return table.name, None
    entry = band.to_entry()
    if entry["held_out"] is not None:
        entry["held_out"]["measured_on"] = datetime.now(UTC).strftime("%Y-%m-%d")
    return table.name, entry


def describe(band: Any) -> str:
    """One line about a band (`Band` or None) for the fit log."""
    if band is None:
        return "no band (fewer than two held-out groups, or too few rows)"
    text = f"band x{np.exp(band.log_lo):.3f} .. x{np.exp(band.log_hi):.3f} ({band.rows} rows)"
    ho = band.held_out or {}
    if ho.get("coverage") is not None:
        text += (
            f", held-out coverage {100 * ho['coverage']:.1f}% of {ho['rows']} rows "
            f"({ho['groups']} groups, {ho['rows_out_of_range']} out of range)"
        )
    return text
