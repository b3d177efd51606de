"""Device check of `dse profile` (issue 22): a quick profile of the H200 this runs on, fitted
into an artifact, compared with the shipped h200_sxm artifact on the shared H200 shapes.

Run from the repository root on a machine with an NVIDIA GPU, PyTorch (CUDA) and
nvidia-ml-py; the whole check fits in under 10 minutes including the fit:

    python3 benchmarks/device/h200_profile_check.py --out "$OUT" [--data ../shared/data]

or split, profiling on the GPU machine and fitting and scoring anywhere (how it ran here):

    dse profile --device cuda:0 --quick --name h200prof --out prof --ops gemm,attention,moe,layer_ops
    dse profile --device cuda:0 --quick --offset 1 --name h200prof --out prof2 ...   # held out
    python3 benchmarks/device/h200_profile_check.py --profile prof --holdout prof2 --out check

Steps: (1) `dse profile --quick --ops gemm,attention,moe --max-minutes M` (the quick grid,
energy on the 175 GEMM shapes with the full 1 s protocol: ~4-5 minutes estimated); (2) `dse fit --no-cv` on it as GPU `h200prof` (the spec's fields are
the registry's H200 datasheet, matched by device name; the measured peaks sit beside them);
(3) for every kind both artifacts price, MAPE against the measured rows of
  - the shared H200 aiconfigurator tables (vLLM kernels, CUDA-graph replay), when --data has
    them: the shipped artifact scores in-sample there, the profiled one out of its own data;
  - the profile's own rows (PyTorch eager kernels): the profiled artifact in-sample, the
    shipped one across engines;
and the median ratio profiled / shipped on the shared shapes. Writes `h200_profile_check.json`
and prints a table. Engine differences (vLLM's kernels vs PyTorch's) are part of what it shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "h200prof"
KINDS = ("gemm", "context_attention", "generation_attention", "moe")


def dse(*args: str, env: dict[str, str] | None = None) -> None:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    t0 = time.perf_counter()
    print("+ dse", " ".join(args), flush=True)
    subprocess.run([sys.executable, "-m", "dse", *args], check=True, env=full)
    print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


def _engine_of(art, kind: str) -> str | None:
    names = [n for n in art.names() if n.startswith(f"{kind}.")]
    if not names:
        return None
    vllm = [n for n in names if n.split(".")[1] == "vllm"]
    return (vllm or names)[0].split(".")[1]


def score(art, kind: str, rows) -> dict[str, float | int | None]:
    """MAPE of one artifact on measured rows of one kind (rows priced as the artifact's engine)."""
    import numpy as np

    from dse.fitting.families import families

    engine = _engine_of(art, kind)
    fam = next((f for f in families() if kind in f.validates and f.predict_rows), None)
    if engine is None or fam is None or rows.empty:
        return {"rows": len(rows), "mape_pct": None, "pred": None}
    r = rows.assign(engine=engine)
    p = fam.predict_rows(art, kind, r)["latency_pred_s"].to_numpy(float)
    y = r["latency_s"].to_numpy(float)
    ok = np.isfinite(p) & (y > 0)
    mape = float(100 * np.mean(np.abs(p[ok] / y[ok] - 1))) if ok.any() else None
    return {"rows": int(ok.sum()), "mape_pct": mape, "pred": p}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "h200_profile_check"))
    ap.add_argument(
        "--data", default=os.environ.get("DSE_DATA", str(REPO.parent / "shared" / "data"))
    )
    ap.add_argument("--max-minutes", type=float, default=6.0, help="profile budget (default 6)")
    ap.add_argument("--energy-seconds", type=float, default=1.0)
    ap.add_argument(
        "--profile",
        help="score an existing profile folder (measured on the GPU) instead of profiling here: "
        "the device machine profiles, any machine fits and scores",
    )
    ap.add_argument(
        "--holdout",
        help="a second profile folder (`--offset 1`: shapes the first did not measure); "
        "`dse validate` scores the fitted artifact on it",
    )
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prof, surr = out / "profile", out / "surrogates"
    t0 = time.perf_counter()
    if args.profile:
        prof = Path(args.profile)
    else:
        dse(
            "profile", "--device", "cuda:0", "--quick", "--name", NAME, "--out", str(prof),
            "--ops", "gemm,attention,moe", "--max-minutes", str(args.max_minutes),
            "--energy-seconds", str(args.energy_seconds), "--no-progress",
        )  # fmt: skip
    dse("fit", "--data", str(prof), "--gpu", NAME, "--no-cv", env={"DSE_SURROGATES": str(surr)})
    if args.holdout:
        dse(
            "validate", "--data", args.holdout, "--gpu", NAME, "--artifacts", str(surr),
            "--json", str(out / "holdout_validate.json"),
        )  # fmt: skip

    import numpy as np

    from dse.data import load
    from dse.models.artifact import Artifact
    from dse.resources import surrogates_dir

    mine = Artifact.load(surr / NAME)
    shipped = Artifact.load(surrogates_dir() / "h200_sxm")
    own = load(prof, list(KINDS))
    shared: dict = {}
    data = Path(args.data)
    if (data / "aiconfigurator").is_dir():
        shared = load(data, list(KINDS))
    result: dict = {
        "profiled_artifact": mine.artifact_id,
        "shipped_artifact": shipped.artifact_id,
        "profile_manifest": json.loads((prof / "profile.json").read_text()),
        "kinds": {},
    }
    print(f"\n{'kind':<22}{'rows on':>10}{'profiled':>10}{'shipped':>10}  ratio prof/shipped")
    for kind in KINDS:
        entry: dict = {}
        sets = [("profile", own.get(kind))]
        if kind in shared:
            t = shared[kind]
            sets.append(("shared", t[(t["gpu"] == "h200_sxm") & (t["dtype"] == "bfloat16")]))
        for label, rows in sets:
            if rows is None or rows.empty:
                continue
            rows = rows[rows["dtype"] == "bfloat16"].reset_index(drop=True)
            a, b = score(mine, kind, rows), score(shipped, kind, rows)
            ratio = None
            if a["pred"] is not None and b["pred"] is not None:
                q = a["pred"] / b["pred"]
                q = q[np.isfinite(q)]
                ratio = float(np.median(q)) if q.size else None
            entry[label] = {
                "rows": len(rows),
                "profiled_mape_pct": a["mape_pct"],
                "shipped_mape_pct": b["mape_pct"],
                "median_ratio_profiled_over_shipped": ratio,
            }

            def f(v: float | None) -> str:
                return "-" if v is None else f"{v:.1f}%"

            print(
                f"{kind:<22}{label:>10}{f(a['mape_pct']):>10}{f(b['mape_pct']):>10}  "
                f"{'-' if ratio is None else f'{ratio:.2f}'}"
            )
        result["kinds"][kind] = entry
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "h200_profile_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"\nwrote {out / 'h200_profile_check.json'} ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
