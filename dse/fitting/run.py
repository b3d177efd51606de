"""`dse fit` behind the CLI: run every registered model family for one GPU, cross-validate by
held-out shape groups, write the frozen artifact.

`FAMILIES` lists every family in fitting order, explicitly (nothing registers itself on import):
the Level-1 families this module owns, "power" (board power vs utilisation, fitted on the H200
rows) and "gemm" (one `GemmModel` per engine and dtype of the GPU), those of
`dse.fitting.layer_ops` (layer ops, reductions, all-reduce, attention, MoE), and Levels 2-3
(`dse.fitting.level3`), which must come after every Level-1 model they correct.

    art = fit_artifact("/path/to/data", "h100_sxm", seed=0)
    art.save("surrogates/h100_sxm")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DataError
from dse.fitting.artifacts import LEVEL_PREFIXES
from dse.fitting.families import families
from dse.models._threads import fit_threads
from dse.models.artifact import GPU_SPECS, Artifact, FittedModel
from dse.spec.hardware import SPEC_FILE, get_gpu, gpu_names, register_folder_spec, shipped_gpu


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


# ---------------------------------------------------------------------------- driver
def fit_artifact(
    data_root: str | Path,
    gpu: str,
    seed: int = 0,
    only: Iterable[str] | None = None,
    keep: Artifact | None = None,
    log: Callable[[str], None] = print,
    threads: int = 1,
    cv: bool = True,
    jobs: int = 1,
    band_coverage: bool = False,
    models: Iterable[str] | None = None,
) -> Artifact:
    """Fit every registered family (or those named in `only`) for `gpu` into an Artifact.

    Models of `keep` (an existing artifact) that no family produced this run are carried over
    unchanged and listed under manifest["carried_over"], so one family can be refitted alone.
    `jobs`: processes for the GEMM, attention and MoE tables (each fit is seeded by itself, so
    the artifact does not depend on it). `band_coverage`: measure each kernel band's coverage
    on held-out layouts too (`dse.fitting.bands`, nested CV). `models`: refit only these model
    names of the families run (the rest of `keep` is carried over; needs `keep`).
    """
    root = Path(data_root).resolve()
    if not root.is_dir():
        raise DataError(f"{data_root}: data folder not found")
    # a `dse profile` folder's GPU (gpu.yaml) joins the registry
    profiled = register_folder_spec(root)
    if profiled is not None and not profiled.kernel_peaks and shipped_gpu(profiled.name) is None:
        log(
            f"{root / SPEC_FILE}: no kernel_peaks (a profile written before they were): the "
            "physical floors of its rows use its one measured GEMM peak, which other kernel "
            "kinds may beat; rerun the same `dse profile` command (it measures nothing new) "
            "to add them"
        )
    get_gpu(gpu)  # unknown names fail here with the list of valid ones
    fams = families()
    if only is not None:
        wanted = set(only)
        unknown = wanted - {f.name for f in fams}
        if unknown:
            raise DataError(
                f"unknown model families {sorted(unknown)}; registered: "
                f"{', '.join(f.name for f in fams)}"
            )
        fams = [f for f in fams if f.name in wanted]
    if jobs < 1:
        raise DataError(f"jobs must be at least 1, got {jobs}")
    if jobs > 1 and threads > 1:
        # the worker processes run one thread each (`_fitutil.map_tasks`); so does this one
        log(
            f"--jobs {jobs}: each process runs one BLAS/OpenMP thread (--threads {threads} ignored)"
        )
        threads = 1
    wanted_models = None if models is None else frozenset(models)
    if wanted_models is not None and keep is None:
        raise DataError("refitting single models (--model) needs an existing artifact at --out")
    ctx = FitContext(
        root,
        gpu,
        seed,
        cv=cv,
        log=log,
        keep=keep,
        jobs=jobs,
        band_coverage=band_coverage,
        models=wanted_models,
    )
    with fit_threads(threads):  # every model's fit runs with these (`dse.models._threads`)
        for fam in fams:
            np.random.seed(seed)  # families that draw from the global generator stay seeded
            for fm in fam.fit(ctx):
                if ctx.wants(fm.name):
                    ctx.fitted[fm.name] = fm
    if wanted_models is not None and not wanted_models <= set(ctx.fitted):
        raise DataError(
            f"--model: no family run fitted {sorted(wanted_models - set(ctx.fitted))} "
            f"(fitted: {', '.join(sorted(ctx.fitted)) or 'none'})"
        )
    if not ctx.fitted:
        raise DataError(
            f"{data_root}: no rows any model family can fit for GPU {gpu!r} "
            f"(registry GPUs: {', '.join(gpu_names())})"
        )
    art = Artifact.from_fitted(
        gpu,
        list(ctx.fitted.values()),
        data_root=root,
        extra={
            "seed": seed,
            "cross_validated": cv,
            "families": [f.name for f in fams],
            "implausible_rows": ctx.implausible,
            "skipped_tables": ctx.skipped,
        },
    )
    if keep is not None:
        carried = [n for n in keep.models if n not in art.models]
        for n in carried:
            art.models[n] = keep.models[n]
            art.manifest["models"][n] = keep.manifest["models"][n]
        known = {f["path"] for f in art.manifest["data_files"]}
        art.manifest["data_files"] += [
            f for f in keep.manifest.get("data_files", []) if f["path"] not in known
        ]
        art.manifest["carried_over"] = carried
        # the kept models' screen reports stay, for the kinds this run did not read again
        kept_report = keep.manifest.get("implausible_rows") or {}
        art.manifest["implausible_rows"] = {
            **{k: v for k, v in kept_report.items() if k not in ctx._tables},
            **ctx.implausible,
        }
        if keep.level1_gpu != gpu:
            # Level-1 models measured on another chip (GH200 with H200's kernel models): the
            # artifact says so, and predictions move their times to `gpu` by the roofline.
            refit = [n for n in ctx.fitted if not n.startswith(LEVEL_PREFIXES)]
            if refit:
                raise DataError(
                    f"{gpu}: the artifact at the output holds Level-1 models of "
                    f"{keep.level1_gpu}; refitting {refit[0]} for {gpu} would mix two chips' "
                    "kernels (fit every Level-1 family into an empty folder, or only "
                    "hymell-levels-2-3)"
                )
            art.manifest["level1_gpu"] = keep.level1_gpu
            kept_specs = keep.manifest.get(GPU_SPECS) or {}
            if keep.level1_gpu in kept_specs:  # the spec of the chip they were measured on
                art.manifest[GPU_SPECS] = {
                    **(art.manifest.get(GPU_SPECS) or {}),
                    keep.level1_gpu: kept_specs[keep.level1_gpu],
                }
        from dse.models.artifact import weights_id

        art.manifest["artifact_id"] = weights_id(art.models)
    return art
