"""Fitting HYMELL Level 3 (and the Level-3 power calibration) into one GPU's artifact.

Level 3 of artifact X is fitted on the argonne end-to-end rows of the GPUs in `LEVEL3_ROWS[X]`
(X itself, or the chip it shares compute with when X has no end-to-end measurements), each row
priced by X's Level-1/2 models moved to the row's GPU by the roofline ratio
(`dse.surrogate.hymell.transfer_factor`). vLLM and TensorRT-LLM are separate engines.
Errors are held-out: leave-one-model-out inside `Level3.fit_arrays`.

    fitted = fit_levels("h100_sxm", "/path/to/data", artifact=level1_artifact)
    art = Artifact.from_fitted("h100_sxm", level1_fitted + fitted, data_root=...)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dse import configs as C
from dse.errors import ConfigError, DataError
from dse.hardware import get_gpu
from dse.surrogate.artifact import Artifact, FittedModel
from dse.surrogate.level3 import GlobalInputs, Level3, fit_summary
from dse.surrogate.power3 import fit_power3

# Artifact GPU -> the GPUs whose argonne rows fit its Level 3.
LEVEL3_ROWS: dict[str, tuple[str, ...]] = {
    "h100_sxm": ("h100_sxm",),
    "h200_sxm": ("h100_sxm",),  # same GH100 compute; no end-to-end rows of its own
    "a100_sxm": ("a100_sxm_40gb",),  # argonne's A100s are the 40GB part (ALCF Polaris)
    "a100_sxm_40gb": ("a100_sxm_40gb",),
    "gh200": ("gh200",),
}
ENGINES = ("vllm", "trtllm")

Lookup = Callable[[str], Any]  # model name -> dse.arch.Architecture


def _default_lookup() -> Lookup:
    try:
        from dse.models import lookup_model
    except ImportError as exc:  # the catalogue is part of the package; this is a broken install
        raise DataError(f"the model catalogue dse.models cannot be imported ({exc})") from None
    return lookup_model


def e2e_configs(
    rows: pd.DataFrame, lookup: Lookup | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Configuration columns for argonne-style rows (model, gpu, engine, batch_size,
    input_tokens, output_tokens, n_gpus) and the rows kept (same order). Rows whose model is not
    in the catalogue, whose engine is not modelled, or whose configuration is invalid / does not
    fit in memory are dropped (the caller counts them)."""
    lookup = lookup or _default_lookup()
    archs: dict[str, dict[str, Any] | None] = {}
    for name in rows["model"].unique():
        try:
            archs[name] = lookup(name).to_dict()
        except (ConfigError, KeyError):
            archs[name] = None
    keep = rows["engine"].isin(ENGINES) & rows["model"].map(lambda m: archs[m] is not None)
    rows = rows[keep].reset_index(drop=True)
    recs = []
    for r in rows.itertuples(index=False):
        a = dict(archs[r.model])  # type: ignore[arg-type]
        a.update(
            gpu=r.gpu,
            engine=r.engine,
            batch_size=int(r.batch_size),
            prompt_tokens=int(r.input_tokens),
            output_tokens=int(r.output_tokens),
            tensor_parallel=int(r.n_gpus),
        )
        recs.append(a)
    cfg = pd.DataFrame(recs, columns=list(C.CONFIG_FIELDS) if not recs else None)
    if len(cfg):
        cols, n = C.as_columns(cfg)
        d = C.derived(cols, n)
        # A run that was measured can be predicted even when our memory rule is conservative:
        # keep rows that do not fit (KV overflow is a Level-3 feature); drop invalid shapes.
        ok = d["invalid"] == ""
        cfg, rows = cfg[ok].reset_index(drop=True), rows[ok].reset_index(drop=True)
    return cfg, rows


def price_rows(
    cfg: pd.DataFrame, artifact: Artifact | None, artifact_gpu: str
) -> tuple[GlobalInputs, dict[str, np.ndarray]]:
    """Level-1/2 costs of each row on its own GPU (artifact kernels moved there) as Level-3
    inputs, plus the kernels' prefill and decode energy per GPU (for the power calibration)."""
    from dse.predictor import base_costs, global_inputs

    cols, _ = C.as_columns(cfg)
    parts: list[GlobalInputs] = []
    from dse.predictor import ATTENTION_KINDS, COMM_KINDS

    keys = ("prefill_energy_j", "decode_energy_j", "decode_attn_energy_j", "decode_comm_energy_j")
    extra: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    order = []
    fitted_on = get_gpu(artifact_gpu) if artifact is not None else None
    for name in np.unique(cols["gpu"]):
        idx = np.nonzero(cols["gpu"] == name)[0]
        sub = {k: v[idx] for k, v in cols.items()}
        gpu = get_gpu(str(name))
        base = base_costs(sub, len(idx), gpu, artifact, fitted_on or gpu)
        parts.append(global_inputs(sub, base))
        extra["prefill_energy_j"].append(base.prefill.energy_j)
        extra["decode_energy_j"].append(base.decode.energy_j)
        extra["decode_attn_energy_j"].append(base.decode.part_j(*ATTENTION_KINDS))
        extra["decode_comm_energy_j"].append(base.decode.part_j(*COMM_KINDS))
        order.append(idx)
    perm = np.argsort(np.concatenate(order))
    g = GlobalInputs(
        **{
            k: np.concatenate([np.asarray(getattr(p, k)) for p in parts])[perm]
            for k in GlobalInputs.__dataclass_fields__
        }
    )
    return g, {k: np.concatenate(v)[perm] for k, v in extra.items()}


def fit_level3(
    gpu: str,
    e2e: pd.DataFrame,
    artifact: Artifact | None,
    lookup: Lookup | None = None,
    seed: int = 0,
    **level3_kw: Any,
) -> tuple[Level3, dict[str, Any]]:
    """Fit Level 3 of artifact `gpu` on the argonne e2e rows of LEVEL3_ROWS[gpu]."""
    sources = LEVEL3_ROWS.get(gpu, (gpu,))
    rows = e2e[e2e["gpu"].isin(sources)]
    cfg, kept = e2e_configs(rows, lookup)
    if not len(cfg):
        raise DataError(f"no argonne end-to-end rows usable for {gpu} (looked for {sources})")
    g, _ = price_rows(cfg, artifact, gpu)
    model = Level3(seed=seed, **level3_kw).fit_arrays(
        g, kept["latency_s"].to_numpy(float), kept["model"].to_numpy()
    )
    info = {
        "rows_from_gpus": list(sources),
        "rows_used": len(kept),
        "rows_skipped": int(len(rows) - len(kept)),
        "models": sorted(kept["model"].unique()),
        "engines": fit_summary(model),
    }
    return model, info


def fit_levels(
    gpu: str,
    data_root: str | Path,
    artifact: Artifact | None = None,
    lookup: Lookup | None = None,
    seed: int = 0,
    tables: Mapping[str, pd.DataFrame] | None = None,
) -> list[FittedModel]:
    """Level 3 (latency) and the Level-3 power calibration for artifact `gpu`, as FittedModels
    named "level3.e2e" and "level3.power". `artifact` holds the Level-1/2 models (None: the
    roofline stands in for them). `tables` may pass already-loaded `dse.data.load` tables."""
    if tables is None:
        from dse.data import load

        tables = load(data_root, ["e2e", "e2e_energy"])
    e2e = tables.get("e2e")
    if e2e is None or e2e.empty:
        raise DataError(f"{data_root}: no argonne end-to-end rows (argonne/Plots/All_results.csv)")
    model, info = fit_level3(gpu, e2e, artifact, lookup, seed)
    files = sorted({str(Path(data_root) / f) for f in e2e["file"].unique()})
    cv = {e: v["cv"] for e, v in info["engines"].items()}
    out = [FittedModel("level3.e2e", model, cv=cv, files=tuple(files), info=info)]
    energy = tables.get("e2e_energy")
    if energy is not None and not energy.empty:
        pw, pinfo = fit_power3(gpu, energy, artifact, model, lookup)
        if pw is not None:
            pfiles = sorted({str(Path(data_root) / f) for f in energy["file"].unique()})
            out.append(
                FittedModel("level3.power", pw, cv=pinfo.pop("cv"), files=tuple(pfiles), info=pinfo)
            )
    return out


# ---------------------------------------------------------------------------- artifacts
def transient_artifact(gpu: str, fitted: list[FittedModel]) -> Artifact:
    """An in-memory artifact of models fitted earlier in a run (no file hashing, no id)."""
    models = {fm.name: {k: np.asarray(v) for k, v in fm.model.to_state().items()} for fm in fitted}
    entries = {
        fm.name: {
            "kind": type(fm.model).kind,
            "class": f"{type(fm.model).__module__}:{type(fm.model).__qualname__}",
            "fitted_range": {k: list(v) for k, v in fm.model.fitted_range().items()},
        }
        for fm in fitted
    }
    manifest = {"artifact_id": "unsaved", "gpu": gpu, "models": entries}
    return Artifact(manifest=manifest, models=models)


def merge(
    base: Artifact | None, gpu: str, fitted: list[FittedModel], data_root: str | Path
) -> Artifact:
    """`base` with the models in `fitted` added or replaced (same names), manifest merged."""
    new = Artifact.from_fitted(gpu, fitted, data_root=data_root)
    if base is None:
        return new
    models = {k: v for k, v in base.models.items() if k not in new.models}
    models.update(new.models)
    manifest = dict(base.manifest)
    entries = {k: v for k, v in base.manifest["models"].items() if k not in new.models}
    entries.update(new.manifest["models"])
    manifest["models"] = entries
    seen = {f["path"] for f in manifest.get("data_files", [])}
    manifest["data_files"] = list(manifest.get("data_files", [])) + [
        f for f in new.manifest["data_files"] if f["path"] not in seen
    ]
    manifest["libraries"] = new.manifest["libraries"]
    return Artifact(manifest=manifest, models=models)


def main(argv: list[str] | None = None) -> int:
    """`python -m dse.surrogate.hymell_fit --data DIR --gpu NAME [--out DIR]`: fit Level 3 onto
    the GPU's existing artifact (Level-1/2 models kept) and save it."""
    import argparse

    from dse.predictor import surrogates_dir

    p = argparse.ArgumentParser(prog="python -m dse.surrogate.hymell_fit", description=main.__doc__)
    p.add_argument("--data", required=True, help="measured-data root (layout of ../shared/data)")
    p.add_argument("--gpu", required=True, action="append", help="artifact GPU (repeatable)")
    p.add_argument("--out", help="surrogates folder to write (default: the shipped one)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from dse.data import load

    tables = load(args.data, ["e2e", "e2e_energy"])
    out_root = Path(args.out) if args.out else surrogates_dir()
    for gpu in args.gpu:
        folder = surrogates_dir() / gpu
        base = Artifact.load(folder) if (folder / "manifest.json").is_file() else None
        level12 = base
        if base is not None:
            keep = [n for n in base.models if not n.startswith("level3.")]
            level12 = Artifact(
                manifest={**base.manifest, "models": {n: base.manifest["models"][n] for n in keep}},
                models={n: base.models[n] for n in keep},
            )
        fitted = fit_levels(gpu, args.data, artifact=level12, seed=args.seed, tables=tables)
        art = merge(base, gpu, fitted, args.data)
        path = art.save(out_root / gpu)
        for fm in fitted:
            print(f"{gpu}: {fm.name}: {json_cv(fm.cv)}")
        print(f"{gpu}: wrote {path} (artifact {art.artifact_id})")
    return 0


def json_cv(cv: Mapping[str, Any]) -> str:
    import json

    return json.dumps(cv, default=float)


if __name__ == "__main__":
    raise SystemExit(main())
