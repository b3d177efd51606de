"""`dse fit` behind the CLI: run every registered model family for one GPU, cross-validate by
held-out shape groups, write the frozen artifact.

`FAMILIES` lists every family in fitting order, explicitly (nothing registers itself on import):
the Level-1 families this module owns, "power" (board power vs utilisation, fitted on the H200
rows) and "gemm" (one `GemmModel` per engine and dtype of the GPU), those of
`dse.surrogate.ops_models` (layer ops, reductions, all-reduce, attention, MoE), and Levels 2-3
(`dse.surrogate.hymell_fit`), which must come after every Level-1 model they correct.

    art = fit_artifact("/path/to/data", "h100_sxm", seed=0)
    art.save("surrogates/h100_sxm")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse.errors import DataError
from dse.models.artifact import Artifact, Family, FittedModel
from dse.roofline import LAUNCH_S, roofline_s
from dse.spec.hardware import get_gpu, gpu_names, register_folder_spec
from dse.spec.stand_ins import POWER_GPU
from dse.surrogate import hymell_fit as HF
from dse.surrogate import ops_models as OM
from dse.surrogate._fitutil import map_tasks

CV_FOLDS = 5  # GroupKFold folds over (n, k) weight shapes: the accuracy claim
CV_FOLDS_M = 3  # GroupKFold folds over m (token counts): the second grouping, reported too


@dataclass
class FitContext:
    """What a family's fit function gets: the GPU, the seed, the data and earlier results."""

    data_root: Path
    gpu: str
    seed: int = 0
    cv: bool = True  # False: fit the final models only (quick refits; manifests say so)
    fitted: dict[str, FittedModel] = field(default_factory=dict)
    log: Callable[[str], None] = print
    # the existing artifact whose models no family of this run refits are carried over (`dse
    # fit --only`); families fitted on top of others (Levels 2-3) build on those models too
    keep: Artifact | None = None
    # processes for families that fit many independent tables (GEMM, attention, MoE; `--jobs`)
    jobs: int = 1
    _tables: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    def table(self, kind: str) -> pd.DataFrame:
        """`dse.data.load` rows of one kind for ALL GPUs (empty frame when the data lacks it)."""
        if kind not in self._tables:
            from dse.data import load

            self._tables[kind] = load(self.data_root, [kind]).get(kind, pd.DataFrame())
        return self._tables[kind]

    def files(self, rows: pd.DataFrame) -> tuple[str, ...]:
        """Absolute paths of the data files `rows` came from (for the manifest's hashes)."""
        if "file" not in rows or rows.empty:
            return ()
        return tuple(str(self.data_root / f) for f in sorted(rows["file"].unique()))


# ---------------------------------------------------------------------------- metrics
def mape_pct(pred: Any, true: Any) -> float | None:
    """Mean absolute percentage error over rows where both are finite and true > 0."""
    p, t = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    ok = np.isfinite(p) & np.isfinite(t) & (t > 0)
    if not ok.any():
        return None
    return round(float(100.0 * np.mean(np.abs(p[ok] / t[ok] - 1.0))), 3)


def group_kfold_predict(
    df: pd.DataFrame,
    groups: np.ndarray,
    n_splits: int,
    fit_predict: Callable[[pd.DataFrame, pd.DataFrame], dict[str, np.ndarray]],
) -> dict[str, np.ndarray]:
    """Out-of-fold predictions: each group is predicted by a model that never saw it.

    `fit_predict(train, test)` fits on train and returns arrays aligned with test.
    """
    from sklearn.model_selection import GroupKFold

    out: dict[str, np.ndarray] = {}
    n_splits = min(n_splits, len(np.unique(groups)))
    if n_splits < 2:  # cross-validation switched off: all-NaN predictions, metrics None
        return out
    for tr, te in GroupKFold(n_splits=n_splits).split(df, groups=groups):
        got = fit_predict(df.iloc[tr], df.iloc[te])
        for key, v in got.items():
            out.setdefault(key, np.full(len(df), np.nan))[te] = v
    return out


def _get(cv: dict[str, np.ndarray], key: str, n: int) -> np.ndarray:
    return cv.get(key, np.full(n, np.nan))


def weight_shape_groups(df: pd.DataFrame) -> np.ndarray:
    """One group per (n, k) weight shape: CV never scores a row whose weight shape it fitted."""
    return (df["n"].astype(str) + "x" + df["k"].astype(str)).to_numpy()


# ---------------------------------------------------------------------------- power family


def power_rows(gemm: pd.DataFrame) -> pd.DataFrame:
    """GEMM rows with measured power, with the utilisations the power model takes."""
    from dse.models.gemm import gemm_work

    rows = gemm[np.isfinite(gemm["power_w"]) & (gemm["source"] == "aiconfigurator")]
    parts = []
    for (gpu, dtype), sub in rows.groupby(["gpu", "dtype"], sort=True):
        spec = get_gpu(gpu)
        flops, b_in, b_out = gemm_work(sub["m"], sub["n"], sub["k"], dtype)
        lat = sub["latency_s"].to_numpy(float)
        parts.append(
            sub.assign(
                compute_util=flops / spec.peak_flops_per_s(dtype) / lat,
                memory_util=(b_in + b_out) / spec.hbm_bw_bytes_per_s / lat,
                idle_power_w=spec.idle_power_w,
                board_power_w=spec.board_power_w,
            )
        )
    return pd.concat(parts, ignore_index=True) if parts else rows.iloc[:0]


def fit_power_family(ctx: FitContext) -> list[FittedModel]:
    from dse.models.power import PowerModel

    rows = power_rows(ctx.table("gemm"))
    if rows.empty:
        ctx.log("power: no rows with measured power in the data; skipped")
        return []
    t0 = time.perf_counter()

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        m = PowerModel(seed=ctx.seed).fit(tr)
        p = m.predict(te["compute_util"], te["memory_util"], te["latency_s"], gpu=POWER_GPU)
        return {"power_w": p["power_w"]}

    cv = group_kfold_predict(rows, weight_shape_groups(rows), CV_FOLDS if ctx.cv else 0, fp)
    model = PowerModel(seed=ctx.seed).fit(rows)
    info = {
        "rows": len(rows),
        "fitted_on_gpus": sorted(rows["gpu"].unique()),
        "note": "fitted on measured board power (H200); other GPUs scale it by their idle and "
        "board power from dse.spec.hardware (assumption, no measured power behind it)",
    }
    cvd = {
        "scheme": f"GroupKFold({CV_FOLDS}) by (n, k) weight shape",
        "power_mape_pct": mape_pct(_get(cv, "power_w", len(rows)), rows["power_w"]),
        "input": "measured utilisations (the GEMM models add a measured-power residual on H200)",
    }
    ctx.log(
        f"power: {len(rows)} rows, CV power MAPE {cvd['power_mape_pct']}% "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    return [
        FittedModel(
            "power",
            model,
            cv=cvd,
            files=ctx.files(rows),
            info=info,
            measured_power=ctx.gpu in set(rows["gpu"]),
        )
    ]


# ---------------------------------------------------------------------------- GEMM family
def gemm_rows(gemm: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """The aiconfigurator GEMM rows of one GPU (the micro-benchmarks the models fit)."""
    return gemm[(gemm["source"] == "aiconfigurator") & (gemm["gpu"] == gpu)]


def _roofline_baselines(rows: pd.DataFrame, gpu: str, dtype: str) -> dict[str, float | None]:
    from dse.models.gemm import gemm_work

    spec = get_gpu(gpu)
    flops, b_in, b_out = gemm_work(rows["m"], rows["n"], rows["k"], dtype)
    roof = roofline_s(flops, b_in + b_out, spec.peak_flops_per_s(dtype), spec.hbm_bw_bytes_per_s)
    return {
        "roofline_mape_pct": mape_pct(roof, rows["latency_s"]),
        "roofline_5us_floor_mape_pct": mape_pct(np.maximum(roof, LAUNCH_S), rows["latency_s"]),
    }


def cross_validate_gemm(
    rows: pd.DataFrame, make: Callable[[], Any], n_splits: int, groups: np.ndarray
) -> dict[str, np.ndarray]:
    """Out-of-fold GEMM predictions (latency, energy, regime) for one model spec."""

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        p = make().fit(tr).predict(te["m"].to_numpy(), te["n"].to_numpy(), te["k"].to_numpy())
        return {key: p[key].astype(float) for key in ("latency_s", "energy_j", "regime")}

    return group_kfold_predict(rows, groups, n_splits, fp)


def _gemm_cv_summary(rows: pd.DataFrame, cv: dict[str, np.ndarray]) -> dict[str, Any]:
    cv = {key: _get(cv, key, len(rows)) for key in ("latency_s", "energy_j", "regime")}
    out: dict[str, Any] = {
        "latency_mape_pct": mape_pct(cv["latency_s"], rows["latency_s"]),
        "energy_mape_pct": mape_pct(cv["energy_j"], rows["energy_j"]),
    }
    if np.isfinite(rows["power_w"]).any():
        out["power_mape_pct"] = mape_pct(cv["energy_j"] / cv["latency_s"], rows["power_w"])
    from dse.models.gemm import REGIMES

    reg = np.nan_to_num(cv["regime"], nan=-1).astype(int)
    out["latency_mape_pct_by_regime"] = {
        REGIMES[g]: {
            "rows": int((reg == g).sum()),
            "mape_pct": mape_pct(cv["latency_s"][reg == g], rows["latency_s"][reg == g]),
        }
        for g in range(len(REGIMES))
    }
    return out


def fit_gemm_family(ctx: FitContext) -> list[FittedModel]:
    rows_all = gemm_rows(ctx.table("gemm"), ctx.gpu)
    if rows_all.empty:
        ctx.log(f"gemm: no aiconfigurator GEMM rows for {ctx.gpu}; skipped")
        return []
    keys = sorted(rows_all.groupby(["engine", "dtype"], sort=True).groups)
    return map_tasks(ctx, _fit_gemm_table, [(str(e), str(d)) for e, d in keys])


def _fit_gemm_table(ctx: FitContext, engine: str, dtype: str) -> FittedModel:
    """One GEMM table's model (CV by weight shape and by m, then the final fit): a task of
    `map_tasks` (its trees and bags are seeded by themselves, not from a shared generator)."""
    from dse.models.gemm import GemmModel
    from dse.predict.gemm_choice import model_name

    rows_all = gemm_rows(ctx.table("gemm"), ctx.gpu)
    sel = (rows_all["engine"] == engine) & (rows_all["dtype"] == dtype)
    rows = rows_all[sel].reset_index(drop=True)
    power = ctx.fitted.get("power")
    power_model = power.model if power is not None else None
    t0 = time.perf_counter()

    def make() -> GemmModel:
        return GemmModel(ctx.gpu, dtype, engine, power_model=power_model, seed=ctx.seed)

    folds, folds_m = (CV_FOLDS, CV_FOLDS_M) if ctx.cv else (0, 0)
    cv_nk = cross_validate_gemm(rows, make, folds, weight_shape_groups(rows))
    cv_m = cross_validate_gemm(rows, make, folds_m, rows["m"].to_numpy())
    model = make().fit(rows)
    fitted = model.predict(rows["m"].to_numpy(), rows["n"].to_numpy(), rows["k"].to_numpy())
    cv = {
        "scheme": f"GroupKFold({CV_FOLDS}) by (n, k) weight shape" if ctx.cv else "not run",
        "rows": len(rows),
        "groups": len(np.unique(weight_shape_groups(rows))),
        **_gemm_cv_summary(rows, cv_nk),
        "by_m": {
            "scheme": f"GroupKFold({CV_FOLDS_M}) by m (token count)",
            "latency_mape_pct": mape_pct(_get(cv_m, "latency_s", len(rows)), rows["latency_s"]),
            "energy_mape_pct": mape_pct(_get(cv_m, "energy_j", len(rows)), rows["energy_j"]),
        },
        "in_sample": {
            "latency_mape_pct": mape_pct(fitted["latency_s"], rows["latency_s"]),
            "energy_mape_pct": mape_pct(fitted["energy_j"], rows["energy_j"]),
        },
        "baselines": _roofline_baselines(rows, ctx.gpu, dtype),
    }
    info = {
        "engine": engine,
        "dtype": dtype,
        "engine_versions": sorted(rows["engine_version"].unique()),
        "kernel_sources": sorted(rows["kernel_source"].dropna().unique()),
        "coefficients": model.coefficients(),
    }
    name = model_name(engine, dtype)
    ctx.log(
        f"{name}: {len(rows)} rows, CV latency MAPE {cv['latency_mape_pct']}% "
        f"(by m {cv['by_m']['latency_mape_pct']}%), energy {cv['energy_mape_pct']}%, "
        f"roofline {cv['baselines']['roofline_mape_pct']}% "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    return FittedModel(
        name,
        model,
        cv=cv,
        files=ctx.files(rows),
        info=info,
        measured_power=model.measured_power,
    )


def predict_gemm_rows(artifact: Artifact, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
    """`dse validate` hook: latency and energy of every GEMM row the artifact can price.

    Rows of an engine without its own model use the default engine's model; float16 rows use
    the bf16 model (same tensor-core rate and element size).
    """
    from dse.errors import ArtifactError, ConfigError
    from dse.predict.gemm_choice import Gemm

    out = pd.DataFrame(
        {"latency_pred_s": np.nan, "energy_pred_j": np.nan}, index=rows.index, dtype=float
    )
    try:
        gemm = Gemm(artifact)
        gemm.default_engine()
    except ArtifactError:
        return out
    for (engine, dtype), sub in rows.groupby(["engine", "dtype"], sort=False):
        try:
            p = gemm.predict(sub["m"], sub["n"], sub["k"], dtype=dtype, engine=engine)
        except (ArtifactError, ConfigError):
            continue
        out.loc[sub.index, "latency_pred_s"] = p["latency_s"]
        out.loc[sub.index, "energy_pred_j"] = p["energy_j"]
    return out


# Every model family `dse fit` runs and `dse validate` scores (for its `validates` kinds), in
# fitting order.
FAMILIES: tuple[Family, ...] = (
    Family("power", fit_power_family, order=10),
    Family("gemm", fit_gemm_family, predict_gemm_rows, ("gemm",), order=20),
    Family(
        "layer_op",
        OM.fit_layer_op_family,
        OM.predict_layer_op_rows,
        ("layer_op",),
        order=30,
    ),
    Family(
        "reduction",
        OM.fit_reduction_family,
        OM.predict_reduction_rows,
        OM.LLMCOMPASS_OPS,
        order=31,
    ),
    Family(
        "allreduce",
        OM.fit_allreduce_family,
        OM.predict_allreduce_rows,
        ("allreduce",),
        order=32,
    ),
    Family(
        "attention",
        OM.fit_attention_family,
        OM.predict_attention_rows,
        ("context_attention", "generation_attention"),
        order=40,
    ),
    Family("moe", OM.fit_moe_family, OM.predict_moe_rows, ("moe",), order=41),
    Family(
        HF.FAMILY,
        HF._family_fit,
        HF._family_predict_rows,
        ("e2e", "e2e_energy", "e2e_ttft", "serving_energy"),
        order=900,
    ),
)


def families() -> list[Family]:
    """The model families in fitting order."""
    return sorted(FAMILIES, key=lambda f: (f.order, f.name))


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
) -> Artifact:
    """Fit every registered family (or those named in `only`) for `gpu` into an Artifact.

    Models of `keep` (an existing artifact) that no family produced this run are carried over
    unchanged and listed under manifest["carried_over"], so one family can be refitted alone.
    `jobs`: processes for the GEMM, attention and MoE tables (each fit is seeded by itself, so
    the artifact does not depend on it).
    """
    from threadpoolctl import threadpool_limits

    root = Path(data_root).resolve()
    if not root.is_dir():
        raise DataError(f"{data_root}: data folder not found")
    register_folder_spec(root)  # a `dse profile` folder's GPU (gpu.yaml) joins the registry
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
    ctx = FitContext(root, gpu, seed, cv=cv, log=log, keep=keep, jobs=jobs)
    with threadpool_limits(threads):
        for fam in fams:
            np.random.seed(seed)  # families that draw from the global generator stay seeded
            for fm in fam.fit(ctx):
                ctx.fitted[fm.name] = fm
    if not ctx.fitted:
        raise DataError(
            f"{data_root}: no rows any model family can fit for GPU {gpu!r} "
            f"(registry GPUs: {', '.join(gpu_names())})"
        )
    art = Artifact.from_fitted(
        gpu,
        list(ctx.fitted.values()),
        data_root=root,
        extra={"seed": seed, "cross_validated": cv, "families": [f.name for f in fams]},
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
        from dse.models.artifact import weights_id

        art.manifest["artifact_id"] = weights_id(art.models)
    return art
