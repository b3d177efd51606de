"""What a model family's fit function gets from `dse fit` (`dse.fitting.run.fit_artifact`): the
GPU, the seed, the measured tables and the models fitted earlier in the run (`FitContext`).

Its own module so that the families (`dse.fitting.families` and the family modules) can name it
without importing the driver that imports them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dse.models.artifact import Artifact, FittedModel


@dataclass
class FitContext:
    """What a family's fit function gets: the GPU, the seed, the data and earlier results."""

    data_root: Path
    gpu: str
    seed: int = 0
    cv: bool = True  # False: fit the final models only (quick refits; manifests say so)
    # True: measure each kernel band's coverage on held-out layouts too (`dse.fitting.bands`,
    # nested CV: about folds x the CV's fits again); False: the band alone, from the CV
    band_coverage: bool = False
    fitted: dict[str, FittedModel] = field(default_factory=dict)
    log: Callable[[str], None] = print
    # the existing artifact whose models no family of this run refits are carried over (`dse
    # fit --only`); families fitted on top of others (Levels 2-3) build on those models too
    keep: Artifact | None = None
    # processes for families that fit many independent tables (GEMM, attention, MoE; `--jobs`)
    jobs: int = 1
    # the model names to refit (`dse fit --model`); None: every model of the families run. A
    # family with many tables skips the others (`wants`); any other result is dropped after.
    models: frozenset[str] | None = None
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)
    # per kind, the rows below their physical floor left out of `table` (`fitting.plausible`)
    implausible: dict[str, dict[str, Any]] = field(default_factory=dict)
    # per model name, a table left unfitted for too few rows (`skip_small`): the manifest's
    # `skipped_tables`
    skipped: dict[str, dict[str, Any]] = field(default_factory=dict)

    def table(self, kind: str) -> pd.DataFrame:
        """`dse.data.load` rows of one kind for ALL GPUs (empty frame when the data lacks it),
        without the rows faster than physics allows (counted, named and logged once)."""
        if kind not in self._tables:
            from dse.data import load
            from dse.fitting import plausible

            rows = load(self.data_root, [kind]).get(kind, pd.DataFrame())
            rows, report = plausible.screen(kind, rows)
            if report["rows"]:
                self.implausible[kind] = report
                plausible.log_report(kind, report, self.log)
            self._tables[kind] = rows
        return self._tables[kind]

    def skip_small(self, name: str, kind: str, engine: str, rows: int, minimum: int) -> None:
        """Leave one table of `ctx.gpu` unfitted for having fewer than `minimum` rows, and say
        so: a line in the log and an entry in the manifest's `skipped_tables`, with the rows of
        the GPU and engine left out as implausible (`table`; counted per engine, all dtypes):
        they are why a table can fall short."""
        if name in self.skipped:  # asked again (e.g. the band tables of `--bands-only`)
            return
        report = self.implausible.get(kind, {})
        dropped = int(report.get("by_gpu_engine", {}).get(f"{self.gpu}/{engine}", 0))
        self.skipped[name] = {
            "kind": kind,
            "rows": int(rows),
            "min_rows": int(minimum),
            "implausible_rows_left_out": dropped,
        }
        why = (
            f" after {dropped} implausible row(s) were left out (see the line above)"
            if dropped
            else ""
        )
        self.log(
            f"WARNING {name}: not fitted: {rows} rows of {self.gpu}{why}, fewer than the "
            f"{minimum} a {kind} table needs"
        )

    def wants(self, name: str) -> bool:
        """Whether this run refits model `name` (`models`)."""
        return self.models is None or name in self.models

    def files(self, rows: pd.DataFrame) -> tuple[str, ...]:
        """Absolute paths of the data files `rows` came from (for the manifest's hashes)."""
        if "file" not in rows or rows.empty:
            return ()
        return tuple(str(self.data_root / f) for f in sorted(rows["file"].unique()))
