"""Coverage of the kernel bands on held-out layouts (issue 19): calibrate the band of every
Level-1 and Level-2 model of the shipped artifacts on its family's own grouped CV, measure how
often it holds on layouts it was not calibrated on (the nested protocol of
`dse.fitting.bands`), record both in each artifact's manifest (`models.<name>.band`; weights
and artifact ids unchanged) and write the coverage table into docs/bands.md.

    PYTHONPATH=. python benchmarks/band_coverage.py --jobs 2             # every GPU, ~2 h
    PYTHONPATH=. python benchmarks/band_coverage.py --gpus a100_sxm --only layer_op --no-write

A 90% band should cover 85-95% of the held-out rows of every table (GPU x family x engine x
dtype). `--no-write` leaves the manifests and the docs as they are (the JSON report is written
either way, `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _docsection import replace_between  # noqa: E402  (benchmarks/, the script's folder)
from _provenance import short_commit  # noqa: E402

from dse.fitting.band_calibration import apply_bands, calibrate_artifact  # noqa: E402
from dse.fitting.level3 import level3_band_coverage  # noqa: E402
from dse.models.artifact import Artifact  # noqa: E402

GPUS = ("h100_sxm", "h200_sxm", "a100_sxm", "gh200")
DOC = REPO / "docs" / "bands.md"
MARK = "band-coverage"  # <!-- band-coverage:start --> ... <!-- band-coverage:end -->
TARGET = (0.85, 0.95)
FAMILY_LABEL = {
    "gemm": "GEMM",
    "context_attention": "prefill attention",
    "generation_attention": "decode attention",
    "moe": "fused MoE",
    "layer_op": "layer ops",
    "reduction": "softmax / LayerNorm / GELU",
    "level2": "Level 2 block",
    "allreduce": "all-reduce",
    "collective": "other collectives",
    "level3": "Level 3 end to end",
}
# Families whose groups are not architecture layouts (dse.fitting.cv.NOT_BY_ARCHITECTURE):
# their tables are summarised per GPU, apart from the layout table.
NOT_LAYOUT = ("allreduce", "collective", "reduction")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _band(entry: dict[str, Any]) -> str:
    return f"x{entry['factor_lo']:.3f}-{entry['factor_hi']:.3f}"


def table_rows(
    gpu: str, entries: dict[str, dict[str, Any] | None], dtypes: dict[str, str]
) -> list[dict[str, Any]]:
    """One record per (GPU, family, engine, dtype) table: a model, or a dtype of a model whose
    rows mix two (its held-out coverage measured per dtype). `dtypes`: model name -> the one
    dtype of its rows, where the name does not say it (attention)."""
    out = []
    for name, entry in sorted(entries.items()):
        family, _, rest = name.partition(".")
        engine, _, dtype = rest.partition(".")
        base = {"gpu": gpu, "model": name, "family": family, "engine": engine}
        base["dtype"] = dtype or dtypes.get(name, "")
        if family == "level2":
            base.update(engine="vidur (PyTorch eager)", dtype=rest)
        if family in ("layer_op", "reduction"):
            base.update(engine=rest, dtype="fp16")
        if entry is None or entry.get("held_out") is None:
            out.append({**base, "entry": entry, "rows": 0, "coverage": None})
            continue
        ho = entry["held_out"]
        by = (ho.get("by") or {}).get("dtype")
        if by and family not in NOT_LAYOUT:
            for dt, sub in sorted(by.items()):
                rec = {**base, "dtype": dt, "entry": entry}
                out.append({**rec, "rows": sub["rows"], "coverage": sub["coverage"]})
            continue
        out.append({**base, "entry": entry, "rows": ho["rows"], "coverage": ho["coverage"]})
    return out


def attention_dtypes(data: str, gpus: list[str]) -> dict[tuple[str, str], str]:
    """(GPU, attention model name) -> the dtype(s) of its rows, as the table records them."""
    from dse.data import load

    out: dict[tuple[str, str], str] = {}
    tables = load(data, ["context_attention", "generation_attention"])
    for kind, t in tables.items():
        if t.empty or "dtype" not in t:
            continue
        for (gpu, engine), sub in t.groupby(["gpu", "engine"]):
            if gpu in gpus:
                out[(str(gpu), f"{kind}.{engine}")] = "/".join(
                    sorted(map(str, sub["dtype"].unique()))
                )
    return out


def level3_coverage(data: str, art: Artifact) -> dict[str, dict[str, Any]]:
    """Level 3's held-out band coverage per engine (nested leave-one-model-out), recorded in
    the manifest (`models.level3.e2e.engines.<engine>.band_held_out`, in place)."""
    if not art.has("level3.e2e"):
        return {}
    from dse.data import load

    t = load(data, ["e2e", "e2e_ttft"])
    seed = int(art.manifest.get("seed", 0) or 0)
    got = level3_band_coverage(art.gpu, t["e2e"], art, t.get("e2e_ttft"), seed=seed)
    engines = art.manifest["models"]["level3.e2e"].setdefault("engines", {})
    for engine, summary in got.items():
        engines.setdefault(engine, {})["band_held_out"] = summary
    return got


def level3_rows(gpu: str, got: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Table records of Level 3's band (the shipped one, per engine)."""
    out = []
    for engine, ho in sorted(got.items()):
        lo, hi = ho["shipped_log_band"]
        entry = {
            "log_lo": lo,
            "log_hi": hi,
            "factor_lo": float(np.exp(lo)),
            "factor_hi": float(np.exp(hi)),
            "held_out": ho,
        }
        rec = {"gpu": gpu, "model": f"level3.e2e.{engine}", "family": "level3"}
        rec.update(engine=engine, dtype="fp16", entry=entry)
        out.append({**rec, "rows": ho["rows"], "coverage": ho["coverage"]})
    return out


def _label(r: dict[str, Any]) -> str:
    return FAMILY_LABEL.get(r["family"], r["family"])


def _layout_row(r: dict[str, Any]) -> str:
    e = r["entry"]
    head = f"| {r['gpu']} | {_label(r)} | {r['engine']} | {r['dtype']} |"
    if e is None:
        return head + " 1 | | | no band: a single held-out group | | |"
    ho = e["held_out"]
    if r["coverage"] is None:
        why = f"not measurable: {ho['groups']} groups (the nested CV needs 3)"
        return head + f" {ho['groups']} | | {_band(e)} | {why} | | |"
    cross = (ho.get("cross_fold") or {}).get("coverage")
    return (
        head + f" {ho['groups']} | {r['rows']:,} | {_band(e)} | {_pct(r['coverage'])} | "
        f"{ho['rows_out_of_range']:,} ({_pct(ho['coverage_out_of_range'])}) | {_pct(cross)} |"
    )


def _pooled_row(gpu: str, family: str, rs: list[dict[str, Any]]) -> str:
    rows = sum(r["rows"] for r in rs)
    cov = sum(r["coverage"] * r["rows"] for r in rs) / max(rows, 1)
    covs = [r["coverage"] for r in rs]
    lo = min(r["entry"]["factor_lo"] for r in rs)
    hi = max(r["entry"]["factor_hi"] for r in rs)
    if family == "reduction":
        what = "LLMCompass, one shape held out"
        groups, cell = f"{rs[0]['entry']['held_out']['groups']} shapes", _pct(cov)
    else:
        what = f"{len(rs)} tables, one message-size octave held out"
        groups = "octaves"
        cell = f"{_pct(cov)} pooled ({_pct(min(covs))}-{_pct(max(covs))})"
    label = FAMILY_LABEL.get(family, family)
    return (
        f"| {gpu} | {label} ({what}) | | | {groups} | {rows:,} | x{lo:.3f}-{hi:.3f} | {cell} | | |"
    )


def _miss_line(r: dict[str, Any]) -> str:
    """Where a table's coverage falls outside the target: under it, the layouts the band
    misses; over it, the nested bands (fits with a fold fewer of layouts) against the shipped."""
    ho = r["entry"]["held_out"]
    what = r["model"] + (f" {r['dtype']}" if r["dtype"] and r["dtype"] not in r["model"] else "")
    text = (
        f"- {r['gpu']} {what}: {_pct(r['coverage'])} ({_pct(ho['below'])} of rows under the "
        f"band, {_pct(ho['above'])} over it"
    )
    if r["coverage"] < TARGET[0]:
        worst = "; ".join(
            f"{w['group']} {_pct(w['coverage'])} of {w['rows']} rows "
            f"(median miss x{np.exp(w['median_log_residual']):.2f})"
            for w in ho.get("worst_groups", [])[:3]
        )
        return text + (f"; least covered: {worst})." if worst else ").")
    folds = ho.get("fold_log_bands") or []
    if folds:
        lo, hi = min(f[0] for f in folds), max(f[1] for f in folds)
        text += (
            f"; nested bands x{np.exp(lo):.3f}-{np.exp(hi):.3f} against the shipped "
            f"{_band(r['entry'])}"
        )
    cross = (ho.get("cross_fold") or {}).get("coverage")
    return text + (f"; cross-fold {_pct(cross)})." if cross is not None else ").")


def markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The generated block of docs/bands.md: the coverage table and where it misses."""
    runs = "; then ".join(
        f"{r['date']} on {r['machine']}, commit {r['commit']} (`{r['command']}`, "
        f"{r['minutes']:.0f} min)"
        for r in meta["runs"]
    )
    lines = [
        f"Measured {runs}; artifacts "
        + ", ".join(f"{g} `{a}`" for g, a in meta["artifacts"].items())
        + ". Band: the shipped factors around a prediction inside the fitted range (Level 3: "
        "its end-to-end band, per engine, whole models held out); held-out "
        "coverage: rows of held-out layouts inside their band (nested, widened outside the "
        "outer fit's range as a prediction is); out of range: rows outside that fit's range, "
        "and the coverage among them; cross-fold: the diagnostic band of the other outer folds' "
        "CV residuals (fits as large as the scored one, which saw its layout).",
        "",
        "| GPU | family | engine | dtype | held-out groups | rows | band | held-out coverage "
        "| out of range (covered) | cross-fold |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    misses = []
    for gpu in dict.fromkeys(r["gpu"] for r in records):
        mine = [r for r in records if r["gpu"] == gpu]
        pooled: dict[str, list[dict[str, Any]]] = {}
        for r in mine:
            measured = r["entry"] is not None and r["coverage"] is not None
            if r["family"] in NOT_LAYOUT and measured:
                pooled.setdefault(r["family"], []).append(r)
                continue
            lines.append(_layout_row(r))
        lines += [_pooled_row(gpu, fam, rs) for fam, rs in sorted(pooled.items())]
        misses += [
            r
            for r in mine
            if r["coverage"] is not None and not TARGET[0] <= r["coverage"] <= TARGET[1]
        ]
    if misses:
        lines += ["", "Outside 85-95%:", ""] + [_miss_line(r) for r in misses]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--artifacts", default=str(REPO / "surrogates"), help="folder of <gpu>/")
    ap.add_argument("--gpus", nargs="*", default=list(GPUS))
    ap.add_argument("--only", nargs="*", default=None, help="families (default: every one)")
    ap.add_argument("--jobs", type=int, default=1, help="tables calibrated at once")
    ap.add_argument("--out", default=str(REPO / "results" / "band_coverage.json"))
    ap.add_argument("--no-write", action="store_true", help="leave manifests and docs alone")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the bands a previous run measured into the manifests (same weights)",
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    previous_runs: list[dict[str, Any]] = []
    if args.resume and Path(args.out).is_file():
        old = json.loads(Path(args.out).read_text())
        keys = ("command", "date", "machine", "commit", "minutes")
        previous_runs = old.get("runs") or [{k: old.get(k, "?") for k in keys}]
    report: dict[str, Any] = {
        "command": "PYTHONPATH=. python benchmarks/band_coverage.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()})",
        "commit": short_commit(REPO),
        "gpus": {},
    }
    done: dict[str, Artifact] = {}
    records: list[dict[str, Any]] = []
    dtypes = attention_dtypes(args.data, [*args.gpus, "h200_sxm"])
    for gpu in args.gpus:
        folder = Path(args.artifacts) / gpu
        art = Artifact.load(folder)
        reuse = [art] if args.resume else []
        if art.level1_gpu != gpu:  # a GH200-style artifact: H200's Level-1 models
            lender = done.get(art.level1_gpu)
            if lender is None and (folder.parent / art.level1_gpu).is_dir():
                lender = Artifact.load(folder.parent / art.level1_gpu)
            reuse += [lender] if lender is not None else []
        t1 = time.perf_counter()
        entries = calibrate_artifact(
            args.data, art, only=args.only, jobs=args.jobs, log=print, reuse=reuse
        )
        apply_bands(art, entries)
        e2e = level3_coverage(args.data, art) if args.only is None else {}
        if not args.no_write:
            art.save_manifest(folder)
        done[gpu] = art
        report["gpus"][gpu] = {
            "artifact": art.artifact_id,
            "minutes": round((time.perf_counter() - t1) / 60, 1),
            "bands": entries,
            "level3": e2e,
        }
        names = {n: d for (g, n), d in dtypes.items() if g == art.level1_gpu}
        records += table_rows(gpu, entries, names) + level3_rows(gpu, e2e)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")  # survives a stop
    report["minutes"] = round((time.perf_counter() - t0) / 60, 1)
    # a resumed run lists the run(s) whose bands it kept first
    keys = ("command", "date", "machine", "commit", "minutes")
    report["runs"] = [*previous_runs, {k: report[k] for k in keys}]
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    meta = {
        "runs": report["runs"],
        "artifacts": {g: v["artifact"] for g, v in report["gpus"].items()},
    }
    text = markdown(records, meta)
    print(text)
    if not args.no_write:
        replace_between(DOC, MARK, text)
        print(f"wrote {DOC.relative_to(REPO)} ({MARK}) and the manifests; report {args.out}")


if __name__ == "__main__":
    main()
