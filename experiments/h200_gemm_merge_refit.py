"""Put the held-out-scored GEMM power refit into the shipped H200 and GH200 artifacts, latency
bit-identical.

    PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates python experiments/h200_gemm_merge_refit.py \\
        --data ../shared/data --old OLD_H200_FOLDER /tmp/fit_bf16:gemm.vllm.bfloat16 \\
        /tmp/fit_fp8:gemm.vllm.fp8_block

Each FOLDER:MODEL is an artifact `dse fit --out FOLDER --only gemm --model MODEL` wrote (one
process per model, so the two tables fit at once on one core each); its manifest entry gives
the held-out (CV) numbers. A refit on this machine moves the latency fit in the 8th digit
(stage 1's least squares: theta by 1e-8) and the float16 residual table by up to 0.019 in log
in some cells, so the latency arrays of OLD (the artifact before) are kept and only the power
table is refitted on them (`GemmModel._fit_power` on the training rows, as `fit` does). The
model replaces that of surrogates/h200_sxm and of surrogates/gh200, which carries H200's kernel
models (manifest `carried_over`); the manifest entry keeps OLD's band and latency numbers. Refit
level3.power on both afterwards.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from dse.fitting.context import FitContext
from dse.fitting.gemm import gemm_table_rows
from dse.metrics import mape_pct, reported
from dse.models.artifact import Artifact, default_dir
from dse.models.gemm import INPUTS, GemmModel, _residual_features


def refit_power(old: GemmModel, rows) -> GemmModel:
    m, n, k = (rows[c].to_numpy(np.float64) for c in INPUTS)
    p = old.predict(m, n, k)
    p0 = old._generic_power(p["flops"], p["bytes"], p["latency_s"])
    pw = rows["power_w"].to_numpy(np.float64)
    ok = np.isfinite(pw)
    X = _residual_features(m, n, k, old.c_)
    sid = np.unique(np.column_stack([n, k]), axis=0, return_inverse=True)[1].ravel()
    rp = np.log(pw[ok]) - np.log(p0[ok])
    old.power_table_ = old._fit_power(X[ok], m[ok], n[ok], k[ok], sid[ok], rp)
    return old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--old", required=True)
    ap.add_argument("refits", nargs="+")
    args = ap.parse_args()
    old = Artifact.load(args.old)
    ctx = FitContext(Path(args.data), "h200_sxm", 0, cv=False, log=lambda s: None)
    states, entries = {}, {}
    for folder, name in (a.rsplit(":", 1) for a in args.refits):
        model = GemmModel.from_state(old.models[name])
        model.seed, model.tree_iter, model.tree_lr = 0, 300, 0.15
        dtype = name.rsplit(".", 1)[1]
        rows = gemm_table_rows(ctx, "vllm", dtype)
        model = refit_power(model, rows)
        states[name] = {key: np.asarray(v) for key, v in model.to_state().items()}
        for key in states[name]:
            if key != "power_table":
                assert np.array_equal(states[name][key], old.models[name][key]), key
        entry = dict(Artifact.load(folder).manifest["models"][name])
        before = old.manifest["models"][name]
        for key in ("band", "fitted_range", "coefficients"):
            if key in before:
                entry[key] = before[key]
        fitted = model.predict(*(rows[c].to_numpy() for c in INPUTS))
        cv = dict(entry["cv"])
        cv["in_sample"] = {
            "latency_mape_pct": before["cv"]["in_sample"]["latency_mape_pct"],
            "energy_mape_pct": reported(
                mape_pct(fitted["energy_j"], rows["energy_j"], keep="positive")
            ),
        }
        entry["cv"] = cv
        entries[name] = entry
        print(f"{name}: in-sample energy {cv['in_sample']['energy_mape_pct']}%")
    for gpu in ("h200_sxm", "gh200"):
        art = Artifact.load(gpu)
        for name in states:
            art.models[name] = states[name]
            art.manifest["models"][name] = entries[name]
        art.save(default_dir(gpu))
        print(f"{gpu}: {', '.join(states)} replaced; artifact {art.artifact_id}")


if __name__ == "__main__":
    main()
