"""Cross-validated accuracy (held-out shape groups) and prediction speed of the Level-1 operator
models other than GEMM: layer ops (vidur), softmax / layernorm / GELU (LLMCompass), all-reduce,
context / generation attention and the fused MoE block.

Every number is out-of-fold: a row is predicted by a model whose fit never saw any row of its
group (vidur model; message-size octave; head configuration; MoE layer shape). Writes a JSON
report and prints markdown tables for docs/accuracy.md.

    PYTHONPATH=. python benchmarks/level1_ops_cv.py --data ../shared/data --out results/l1ops.json
    PYTHONPATH=. python benchmarks/level1_ops_cv.py --only attention --gpus h100_sxm --folds 5
    PYTHONPATH=. python benchmarks/level1_ops_cv.py --only attention moe --gpus h100_sxm \
        --jobs 16 --hidden 32x32 --max-iter 150 --max-rows 15000    # another model size
    PYTHONPATH=. python benchmarks/level1_ops_cv.py --only attention --gpus h100_sxm \
        --members 2                     # mean of 2 seeded residual MLPs in every table
    PYTHONPATH=. python benchmarks/level1_ops_cv.py --only attention moe --gpus h100_sxm \
        --groupings workload            # hold out workload points instead of shapes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.data import load
from dse.fitting import _hybrid_tables, allreduce, attention, moe, reductions
from dse.fitting import cv as U
from dse.fitting import layer_ops as O
from dse.metrics import ape_pct, mape_pct, reported
from dse.models import attention as attention_mod
from dse.models import moe as moe_mod
from dse.models.allreduce import AllReduceModel, shape_implementation
from dse.models.attention import attention_inputs
from dse.models.layer_ops import LayerOpModel, layer_op_inputs
from dse.models.moe import MoEModel

GPUS = ("h100_sxm", "h200_sxm", "a100_sxm")
PARTS = ("layer_op", "reduction", "allreduce", "attention", "moe")
# What a group holds out (`--groupings`). shape: the strict reading of "shapes the fit did not
# see" (every row of a head configuration / MoE layer shape); workload: every row of a workload
# point (attention: batch x prompt or KV length over all head configurations; MoE: a token
# count over all layer shapes), the model having seen the shapes at other workloads; model
# (MoE only): the layer's hidden, width, top-k and experts at every tensor / expert split.
ATTENTION_GROUPINGS = {"shape": "head config", "workload": "batch x length"}
MOE_GROUPINGS = {"shape": "layer shape", "model": "model shape", "workload": "token count"}


# ---------------------------------------------------------------------------- parts
def bench_layer_op(tables: dict[str, pd.DataFrame], gpu: str, args: Any) -> list[dict]:
    rows = O.layer_op_rows(tables.get("layer_op", pd.DataFrame()), gpu)
    if rows.empty:
        return []
    t0 = time.perf_counter()
    pred = O.cv_layer_op(rows, gpu)
    summ = O.layer_op_cv_summary(rows, pred, gpu)
    # the same model with other held-out groups: by width (every model sharing a d_model held
    # out together), by token-count octave ([2^k, 2^k+1) held out for every model, tp and op:
    # the end octaves are extrapolation) and by token count (5 seeded folds of the distinct
    # token counts: interpolation between measured counts)
    tokens = rows["num_tokens"].to_numpy()
    octave = np.floor(np.log2(tokens)).astype(np.int64)
    uniq = np.unique(tokens)
    fold_of = dict(
        zip(uniq, np.random.default_rng(args.seed).permutation(len(uniq)) % 5, strict=True)
    )
    held: dict[str, np.ndarray] = {}
    for scheme, groups in (
        ("d_model", rows["d_model"].to_numpy()),
        ("token_octave", octave),
        ("token_folds", np.array([fold_of[t] for t in tokens])),
    ):
        held[scheme] = np.full(len(rows), np.nan)
        for gv in np.unique(groups):
            te = groups == gv
            if te.all():
                continue
            m = LayerOpModel(gpu).fit(rows[~te])
            held[scheme][te] = m.predict(**layer_op_inputs(rows[te]))["latency_s"]
    by_d = held["d_model"]
    y = rows["latency_s"].to_numpy(float)
    gated = rows["gated_mlp"].to_numpy(bool)
    ops = rows["op"].to_numpy(str)
    full = LayerOpModel(gpu).fit(rows)
    ins = full.predict(**layer_op_inputs(rows))["latency_s"]
    # 1 us is the timer resolution of vidur's rows: the in-sample error with the prediction
    # rounded to it shows how much of the error is resolution, not model
    return [
        {
            "part": "layer_op",
            "gpu": gpu,
            "model": "layer_op.vidur",
            "scheme": summ["scheme"],
            "rows": len(rows),
            "latency_mape_pct": summ["latency_mape_pct"],
            "gated_models_mape_pct": summ["latency_mape_pct_gated_models"],
            "rows_over_20us_mape_pct": summ["latency_mape_pct_rows_over_20us"],
            "by_op": summ["latency_mape_pct_by_op"],
            "by_model": summ["latency_mape_pct_by_model"],
            "by_d_model_mape_pct": reported(mape_pct(by_d, y), 2),
            "by_d_model_gated_mape_pct": reported(mape_pct(by_d[gated], y[gated]), 2),
            "by_token_octave_mape_pct": reported(mape_pct(held["token_octave"], y), 2),
            "by_token_octave_gated_mape_pct": reported(
                mape_pct(held["token_octave"][gated], y[gated]), 2
            ),
            "by_token_folds_mape_pct": reported(mape_pct(held["token_folds"], y), 2),
            "by_token_folds_gated_mape_pct": reported(
                mape_pct(held["token_folds"][gated], y[gated]), 2
            ),
            "by_token_folds_by_op": {
                str(op): reported(mape_pct(held["token_folds"][ops == op], y[ops == op]), 2)
                for op in np.unique(ops)
            },
            "in_sample_mape_pct": reported(mape_pct(ins, y), 2),
            "in_sample_rounded_1us_mape_pct": reported(
                mape_pct(np.maximum(np.round(ins * 1e6), 1) * 1e-6, y), 2
            ),
            "roofline_mape_pct": summ["baselines"]["roofline_mape_pct"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
    ]


def bench_reduction(tables: dict[str, pd.DataFrame], gpu: str, args: Any) -> list[dict]:
    class Ctx:
        def __init__(self) -> None:
            self.gpu = gpu
            self.seed = args.seed

        def table(self, k: str) -> pd.DataFrame:
            return tables.get(k, pd.DataFrame())

        def files(self, rows: pd.DataFrame) -> tuple[str, ...]:
            return ()

        def log(self, msg: str) -> None:
            pass

    fitted = reductions.fit_reduction_family(Ctx())
    out = []
    for fm in fitted:
        if fm.cv.get("fitted_on") != gpu:
            continue
        for op in ("softmax", "layernorm", "gelu"):
            if f"{op}_latency_mape_pct" in fm.cv:
                out.append(
                    {
                        "part": "reduction",
                        "gpu": gpu,
                        "model": f"reduction.llmcompass/{op}",
                        "scheme": fm.cv["scheme"],
                        "rows": fm.cv[f"{op}_rows"],
                        "latency_mape_pct": fm.cv[f"{op}_latency_mape_pct"],
                    }
                )
    return out


def bench_allreduce(tables: dict[str, pd.DataFrame], gpu: str, args: Any) -> list[dict]:
    out = []
    nv = O.get_gpu(gpu).nvlink_bw_bytes_per_s
    groups = allreduce.allreduce_groups(tables.get("allreduce", pd.DataFrame()), gpu)
    for name, rows in groups.items():
        if not name.startswith("allreduce."):
            continue
        key = name.split(".", 1)[1]
        # an int8 NCCL table borrows the float16 table's shape, at its own training octaves only
        # (the held-out octave is dropped from both)
        shape = groups.get(f"allreduce.{shape_implementation(key)}")
        pred = allreduce.cv_allreduce(rows, lambda key=key: AllReduceModel(gpu, key), shape)
        y = rows["latency_s"].to_numpy(float)
        octv = allreduce.size_octaves(rows)
        inner = (octv > octv.min()) & (octv < octv.max())
        b, g = rows["message_bytes"].to_numpy(float), rows["n_gpus"].to_numpy(float)
        roof = 10e-6 + b * 2 * (g - 1) / g / nv
        out.append(
            {
                "part": "allreduce",
                "gpu": gpu,
                "model": name,
                "scheme": "leave one message-size octave out",
                "rows": len(rows),
                "latency_mape_pct": reported(mape_pct(pred, y), 2),
                "interior_sizes_mape_pct": reported(mape_pct(pred[inner], y[inner]), 2),
                # vidur's eager NCCL launches under 1 MB spread +-50% run to run
                "under_1MB_mape_pct": reported(mape_pct(pred[b < 2**20], y[b < 2**20]), 2),
                "from_1MB_mape_pct": reported(mape_pct(pred[b >= 2**20], y[b >= 2**20]), 2),
                "roofline_mape_pct": reported(mape_pct(roof, y), 2),
            }
        )
    return out


def _hybrid_rows(
    part: str,
    name: str,
    gpu: str,
    rows: pd.DataFrame,
    groups: np.ndarray,
    make: Any,
    inputs: Any,
    roof: np.ndarray,
    args: Any,
) -> dict:
    t0 = time.perf_counter()

    def fp(tr: pd.DataFrame, te: pd.DataFrame) -> dict[str, np.ndarray]:
        return _hybrid_tables._keep(make().fit(tr).predict(**inputs(te)))

    cv = _hybrid_tables.grouped_cv(rows, groups, args.folds, args.seed, fp)
    y = rows["latency_s"].to_numpy(float)
    rec = {
        "part": part,
        "gpu": gpu,
        "model": name,
        "scheme": f"{args.folds} seeded group folds",
        "rows": len(rows),
        "groups": len(np.unique(groups)),
        "latency_mape_pct": reported(mape_pct(cv["latency_s"], y), 2),
        "latency_median_ape_pct": round(float(np.nanmedian(ape_pct(cv["latency_s"], y))), 2),
        "fitted_roofline_mape_pct": reported(mape_pct(cv["base_s"], y), 2),
        "roofline_mape_pct": reported(mape_pct(roof, y), 2),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    if "energy_j" in cv and np.isfinite(rows["energy_j"]).any():
        rec["energy_mape_pct"] = reported(mape_pct(cv["energy_j"], rows["energy_j"]), 2)
        rec["power_mape_pct"] = reported(mape_pct(cv["power_w"], rows["power_w"]), 2)
    return rec


def _attention_tasks(tables: dict[str, pd.DataFrame], gpu: str, args: Any) -> list[tuple]:
    out = []
    for kind in attention.ATTENTION_CLASSES:
        t = tables.get(kind, pd.DataFrame())
        if t.empty:
            continue
        for engine in sorted(t.loc[t["gpu"] == gpu, "engine"].unique()):
            for g in args.groupings:
                if g in ATTENTION_GROUPINGS:
                    out.append(("attention", gpu, kind, str(engine), ATTENTION_GROUPINGS[g]))
    return out


def _moe_tasks(tables: dict[str, pd.DataFrame], gpu: str, args: Any) -> list[tuple]:
    t = tables.get("moe", pd.DataFrame())
    if t.empty:
        return []
    out = []
    for (engine, dtype), rows in t[t["gpu"] == gpu].groupby(["engine", "dtype"], sort=True):
        if len(rows) < moe.MIN_MOE_ROWS:
            continue
        for g in args.groupings:
            out.append(("moe", gpu, str(engine), str(dtype), MOE_GROUPINGS[g]))
    return out


def _task_name(task: tuple) -> str:
    """The model name of an attention / MoE task, as in the records ("moe.vllm.fp8", ...)."""
    if task[0] == "attention":
        return f"{task[2]}.{task[3]}"
    return f"moe.{task[2]}.{task[3]}"


def _run_task(task: tuple) -> dict:
    """One held-out CV record of an attention or MoE table (a process-pool worker)."""
    tables, args = _STATE["tables"], _STATE["args"]
    if task[0] == "attention":
        _, gpu, kind, engine, grouping = task
        cls = attention.ATTENTION_CLASSES[kind]
        t = tables[kind]
        rows = t[(t["gpu"] == gpu) & (t["engine"] == engine)].reset_index(drop=True)
        if grouping == ATTENTION_GROUPINGS["shape"]:
            groups = U.group_labels(rows, attention.HEAD_GROUP)
        else:
            length = "isl" if kind == "context_attention" else "kv_len"
            groups = U.group_labels(rows, ["batch_size", length])
        rec = _hybrid_rows(
            "attention",
            f"{kind}.{engine}",
            gpu,
            rows,
            groups,
            lambda: cls(gpu=gpu, engine=engine, seed=args.seed, **_fit_kw(args)),
            attention_inputs,
            attention.attention_roofline_s(kind, rows, gpu),
            args,
        )
    else:
        _, gpu, engine, dtype, grouping = task
        t = tables["moe"]
        rows = t[(t["gpu"] == gpu) & (t["engine"] == engine) & (t["dtype"] == dtype)]
        rows = rows.reset_index(drop=True)
        cols = {
            MOE_GROUPINGS["shape"]: moe.MOE_SHAPE_GROUP,
            MOE_GROUPINGS["model"]: moe.MOE_SHAPE_GROUP[:4],
            MOE_GROUPINGS["workload"]: ["num_tokens"],
        }[grouping]
        # the class `dse fit` ships for this table (the kernel sum for separate-kernel backends)
        cls = moe.model_class_of(engine, rows)
        rec = _hybrid_rows(
            "moe",
            f"moe.{engine}.{dtype}",
            gpu,
            rows,
            U.group_labels(rows, cols),
            lambda: cls(gpu, engine, dtype, seed=args.seed, **_fit_kw(args)),
            cls(gpu, engine, dtype)._table_inputs,
            moe.moe_roofline_s(rows, gpu, dtype),
            args,
        )
        rec["model_class"] = cls.kind
    rec["scheme"] += f" by {grouping}"
    rec["hidden"] = list(attention_mod.HIDDEN if task[0] == "attention" else moe_mod.HIDDEN)
    rec["members"] = (
        attention_mod.MEMBERS["context" if task[2] == "context_attention" else "generation"]
        if task[0] == "attention"
        else moe_mod.MEMBERS
    )
    print("#", json.dumps(rec), flush=True)
    return rec


def _fit_kw(args: Any) -> dict[str, int]:
    kw = {"max_rows": args.max_rows}
    if args.max_iter is not None:
        kw["max_iter"] = args.max_iter
    return kw


_STATE: dict[str, Any] = {}


def bench_hybrid(tables: dict[str, pd.DataFrame], tasks: list[tuple], args: Any) -> Iterator[dict]:
    """Attention and MoE records as they finish, `args.jobs` tables at a time (forked worker
    processes, each single-threaded; a record does not depend on the number of jobs)."""
    _STATE.update(tables=tables, args=args)
    if args.jobs <= 1 or len(tasks) <= 1:
        yield from map(_run_task, tasks)
        return
    import multiprocessing as mp

    with mp.get_context("fork").Pool(min(args.jobs, len(tasks))) as pool:
        yield from pool.imap_unordered(_run_task, tasks, chunksize=1)


# ---------------------------------------------------------------------------- speed
def bench_speed(tables: dict[str, pd.DataFrame], n: int = 1_000_000) -> dict[str, float]:
    """Predictions per second on one core, batches of n (models fitted on H100 rows)."""
    rng = np.random.default_rng(0)
    out: dict[str, float] = {}
    lo = O.layer_op_rows(tables["layer_op"], "h100_sxm")
    m = LayerOpModel("h100_sxm").fit(lo)
    kw = {
        "op": "input_layernorm",
        "num_tokens": rng.integers(1, 8192, n).astype(float),
        "d_model": np.full(n, 4096.0),
        "n_heads": np.full(n, 32.0),
        "n_kv_heads": np.full(n, 8.0),
        "d_ff": np.full(n, 14336.0),
        "tensor_parallel": np.full(n, 2.0),
    }
    t0 = time.perf_counter()
    m.predict(**kw)
    out["layer_op_per_s"] = n / (time.perf_counter() - t0)
    ar = allreduce.allreduce_groups(tables["allreduce"], "h100_sxm")
    a = AllReduceModel("h100_sxm").fit(ar["allreduce.nccl.nccl"])
    b = 2.0 ** rng.uniform(10, 28, n)
    g = rng.choice([2.0, 4.0, 8.0], n)
    t0 = time.perf_counter()
    a.predict(message_bytes=b, n_gpus=g)
    out["allreduce_per_s"] = n / (time.perf_counter() - t0)
    # the MLP models: speed does not depend on fit quality, so a short fit will do
    if "generation_attention" in tables:
        from dse.models.attention import GenerationAttentionModel

        t = tables["generation_attention"]
        rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm")]
        att = GenerationAttentionModel(gpu="h100_sxm", max_rows=3000, max_iter=5).fit(rows)
        kw = {
            "batch_size": rng.integers(1, 256, n).astype(float),
            "kv_len": rng.integers(1, 32768, n).astype(float),
            "num_heads": np.full(n, 32.0),
            "num_kv_heads": np.full(n, 8.0),
            "head_dim": np.full(n, 128.0),
        }
        t0 = time.perf_counter()
        att.predict(**kw)
        out["generation_attention_per_s"] = n / (time.perf_counter() - t0)
    if "moe" in tables:
        t = tables["moe"]
        rows = t[(t["gpu"] == "h100_sxm") & (t["engine"] == "vllm") & (t["dtype"] == "bfloat16")]
        moe_model = MoEModel("h100_sxm", "vllm", "bfloat16", max_rows=3000, max_iter=5).fit(rows)
        kw = {
            "num_tokens": rng.integers(1, 16384, n).astype(float),
            "hidden_size": np.full(n, 4096.0),
            "inter_size": np.full(n, 14336.0),
            "topk": np.full(n, 2.0),
            "num_experts": np.full(n, 8.0),
        }
        t0 = time.perf_counter()
        moe_model.predict(**kw)
        out["moe_per_s"] = n / (time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------------------- main
def markdown(records: list[dict]) -> str:
    lines = [
        "| part | gpu | model | CV scheme | rows | latency MAPE % | energy MAPE % | fitted roofline % | plain roofline % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['part']} | {r['gpu']} | {r['model']} | {r['scheme']} | {r['rows']} | "
            f"{r.get('latency_mape_pct')} | {r.get('energy_mape_pct', '-')} | "
            f"{r.get('fitted_roofline_mape_pct', '-')} | {r.get('roofline_mape_pct', '-')} |"
        )
    return "\n".join(lines)


def _add(records: list[dict], rec: dict, report: dict[str, Any], args: Any) -> None:
    records.append(rec)
    print(json.dumps(rec), flush=True)
    if args.out:  # partial results survive an interrupted run
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--out", default=None, help="JSON report path")
    ap.add_argument("--gpus", nargs="*", default=list(GPUS))
    ap.add_argument("--only", nargs="*", default=list(PARTS), choices=PARTS)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--max-rows", type=int, default=moe_mod.MAX_ROWS, help="rows per MLP fit")
    ap.add_argument("--max-iter", type=int, default=None, help="MLP epochs (default: shipped)")
    ap.add_argument(
        "--hidden", default=None, help="residual MLP layers, e.g. 32x32 (default: shipped)"
    )
    ap.add_argument(
        "--members", type=int, default=None, help="residual MLPs averaged (default: shipped)"
    )
    ap.add_argument("--jobs", type=int, default=1, help="attention / MoE tables fitted at once")
    ap.add_argument(
        "--tables",
        nargs="*",
        default=None,
        help="only attention / MoE tables whose name holds one of these, e.g. generation_attention.vllm",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--groupings",
        nargs="*",
        default=["shape"],
        choices=sorted(MOE_GROUPINGS),
        help="what a fold holds out (default: shape; model applies to MoE only)",
    )
    ap.add_argument("--speed", action="store_true")
    args = ap.parse_args()
    kinds = {
        "layer_op": ["layer_op"],
        "reduction": ["softmax", "layernorm", "gelu"],
        "allreduce": ["allreduce"],
        "attention": ["context_attention", "generation_attention"],
        "moe": ["moe"],
    }
    speed_kinds = {"layer_op", "allreduce", "generation_attention", "moe"}
    wanted = sorted(
        {k for p in args.only for k in kinds[p]} | (speed_kinds if args.speed else set())
    )
    tables = load(args.data, wanted)
    records: list[dict] = []
    fns = {
        "layer_op": bench_layer_op,
        "reduction": bench_reduction,
        "allreduce": bench_allreduce,
    }
    if args.hidden:
        attention_mod.HIDDEN = moe_mod.HIDDEN = tuple(int(x) for x in args.hidden.split("x"))
    if args.members:
        attention_mod.MEMBERS = dict.fromkeys(attention_mod.MEMBERS, args.members)
        moe_mod.MEMBERS = args.members
    report: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cpus, python {platform.python_version()}",
        "records": records,
    }
    hybrid_tasks = []
    for gpu in args.gpus:
        for part in args.only:
            if part == "attention":
                hybrid_tasks += _attention_tasks(tables, gpu, args)
            elif part == "moe":
                hybrid_tasks += _moe_tasks(tables, gpu, args)
            else:
                for rec in fns[part](tables, gpu, args):
                    _add(records, rec, report, args)
    if args.tables:
        hybrid_tasks = [t for t in hybrid_tasks if any(s in _task_name(t) for s in args.tables)]
    for rec in bench_hybrid(tables, hybrid_tasks, args):
        _add(records, rec, report, args)
    if args.speed:
        report["speed"] = bench_speed(tables)
    print(markdown(records))
    if args.speed:
        print(json.dumps(report["speed"], indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
