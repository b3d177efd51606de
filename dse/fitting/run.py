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
from pathlib import Path

import numpy as np

from dse.errors import DataError
from dse.fitting.artifacts import LEVEL_PREFIXES
from dse.fitting.context import FitContext
from dse.fitting.families import families
from dse.models.artifact import GPU_SPECS, Artifact
from dse.models.threads import fit_threads
from dse.spec.hardware import SPEC_FILE, get_gpu, gpu_names, register_folder_spec, shipped_gpu


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
    with fit_threads(threads):  # every model's fit runs with these (`dse.models.threads`)
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
