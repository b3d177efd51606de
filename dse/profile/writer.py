"""Where a profile's rows go: an append-only journal per table, then the tables `dse fit` reads.

Journal: `<out>/.journal/<table>.jsonl`, one JSON object per measured (or skipped) shape,
flushed and fsynced before the next shape starts, so a killed run loses at most the shape in
flight; a torn last line is ignored on reading. Tables are rebuilt from the journal (written to
a temporary file, then renamed: a reader never sees half a table) in the layouts of the shared
data:
- aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/<gpu>/<op>/pytorch/<torch>/
  {gemm,context_attention,generation_attention,moe,nccl}_perf.parquet, `latency` in ms per
  call, `power` in W (mean board power over the sustained loop) where measured;
- vidur/data/profiling/compute/<gpu>/profile/<model>/mlp.csv, `time_stats.<op>.{min,max,mean,
  median,std}` in ms.
Columns beyond the ones the readers need (spread, repeats, CI width) ride along per row.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from dse.files import write_atomic

JOURNAL = ".journal"
AIC = Path("aiconfigurator/aic-core/src/aiconfigurator_core/systems/data")
ENGINE = "pytorch"

# table -> (op folder, file stem, dtype column)
AIC_TABLES: dict[str, tuple[str, str, str]] = {
    "gemm": ("gemm", "gemm_perf", "gemm_dtype"),
    "context_attention": ("attention", "context_attention_perf", "attn_dtype"),
    "generation_attention": ("attention", "generation_attention_perf", "attn_dtype"),
    "moe": ("moe", "moe_perf", "moe_dtype"),
    "allreduce": ("comm", "nccl_perf", "nccl_dtype"),
}


class Journal:
    """The append-only record of one profile folder."""

    def __init__(self, out: Path) -> None:
        self.dir = out / JOURNAL
        self.dir.mkdir(parents=True, exist_ok=True)

    def append(self, table: str, row: dict[str, Any]) -> None:
        line = json.dumps(row, allow_nan=True) + "\n"
        with open(self.dir / f"{table}.jsonl", "a") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every intact row of one table (a torn last line from a kill is left out)."""
        path = self.dir / f"{table}.jsonl"
        if not path.is_file():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def done(self) -> set[str]:
        """Keys of every shape already measured or skipped."""
        return {r["key"] for t in self.tables() for r in self.rows(t)}

    def tables(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.jsonl"))


def _aic_frame(table: str, rows: list[dict[str, Any]], info: dict[str, Any]) -> pd.DataFrame:
    _, _, dtype_col = AIC_TABLES[table]
    df = pd.DataFrame(rows)
    out = pd.DataFrame(
        {
            "framework": "PyTorch",
            "version": info["torch"],
            "device": info["name"],
            "op_name": {"allreduce": "all_reduce"}.get(table, table),
            "kernel_source": df["kernel_source"],
            dtype_col: df["dtype"],
        }
    )
    if table == "gemm":
        for c in ("m", "n", "k"):
            out[c] = df[c].astype("int64")
    elif table in ("context_attention", "generation_attention"):
        out["batch_size"] = df["batch_size"].astype("int64")
        out["isl"] = df["isl"].astype("int64") if table == "context_attention" else 1
        out["num_heads"] = df["num_heads"].astype("int64")
        out["num_key_value_heads"] = df["num_kv_heads"].astype("int64")
        out["head_dim"] = df["head_dim"].astype("int64")
        out["beam_width"] = 1
        out["kv_cache_dtype"] = df["dtype"]  # SDPA reads K and V in the compute dtype
        # context: tokens cached before the chunk (none); generation: cached tokens
        out["step"] = 0 if table == "context_attention" else df["kv_len"].astype("int64")
        out["window_size"] = 0
    elif table == "moe":
        for c in ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts"):
            out[c] = df[c].astype("int64")
        out["moe_tp_size"] = 1
        out["moe_ep_size"] = 1
        out["distribution"] = df["distribution"]
    elif table == "allreduce":
        out["num_gpus"] = df["num_gpus"].astype("int64")
        out["message_size"] = df["message_elements"].astype("int64")  # elements, as upstream
        out[dtype_col] = df["dtype"].map({"bfloat16": "bfloat16", "float16": "half"})
    out["latency"] = df["latency_s"] * 1000.0  # s -> ms per call
    if df["power_w"].notna().any():
        out["power"] = df["power_w"]
        if info.get("power_limit_w"):
            out["power_limit"] = float(info["power_limit_w"])
    for c in ("latency_mean_s", "latency_std_s", "latency_min_s", "latency_max_s"):
        out[c[:-2] + "_ms"] = df[c] * 1000.0  # s -> ms
    out["repeats"] = df["repeats"].astype("int64")
    out["calls_per_sample"] = df["calls"].astype("int64")
    out["ci_rel_halfwidth"] = df["ci_rel_halfwidth"]
    # journals written before the graph timer have no column: their rows were Python loops
    loop = "cuda-events" if str(info.get("device", "")).startswith("cuda") else "perf-counter"
    out["timer"] = df["timer"].fillna(loop) if "timer" in df else loop
    out["energy_seconds"] = df["energy_seconds"]
    return out


def _vidur_frames(rows: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    """One mlp.csv frame per model: a row per num_tokens, time_stats per op (ms). A journal
    row holds every op of one (model, tokens) shape under "ops"."""
    flat = [{**{k: v for k, v in r.items() if k != "ops"}, **op} for r in rows for op in r["ops"]]
    df = pd.DataFrame(flat)
    out: dict[str, pd.DataFrame] = {}
    for model, sub in df.groupby("model", sort=True):
        recs = []
        for t, grp in sub.groupby("num_tokens", sort=True):
            first = grp.iloc[0]
            rec: dict[str, Any] = {}
            for _, r in grp.iterrows():
                op = r["op"]
                rec[f"time_stats.{op}.min"] = r["latency_min_s"] * 1000.0
                rec[f"time_stats.{op}.max"] = r["latency_max_s"] * 1000.0
                rec[f"time_stats.{op}.mean"] = r["latency_mean_s"] * 1000.0
                rec[f"time_stats.{op}.median"] = r["latency_s"] * 1000.0
                rec[f"time_stats.{op}.std"] = r["latency_std_s"] * 1000.0
            rec.update(
                n_head=int(first["n_heads"]),
                n_kv_head=int(first["n_kv_heads"]),
                n_embd=int(first["d_model"]),
                n_expanded_embd=int(first["d_ff"]),
                vocab_size=32000,  # the row's model shape; the embedding is not timed
                use_gated_mlp=True,
                num_tokens=int(t),
                num_tensor_parallel_workers=1,
            )
            recs.append(rec)
        out[str(model)] = pd.DataFrame(recs)
    return out


def write_tables(
    out: Path, gpu: str, vidur_gpu: str | None, journal: Journal, info: dict[str, Any]
) -> dict[str, int]:
    """Rebuild every table from the journal; returns rows written per table."""
    counts: dict[str, int] = {}
    for table in journal.tables():
        rows = [r for r in journal.rows(table) if not r.get("skipped")]
        counts[table] = len(rows)
        if not rows:
            continue
        if table in AIC_TABLES:
            op_dir, stem, _ = AIC_TABLES[table]
            frame = _aic_frame(table, rows, info)
            path = out / AIC / gpu / op_dir / ENGINE / info["torch"] / f"{stem}.parquet"
            write_atomic(path, frame.to_parquet(index=False))
        elif table == "layer_op" and vidur_gpu is not None:
            base = out / "vidur/data/profiling/compute" / vidur_gpu / "profile"
            for model, frame in _vidur_frames(rows).items():
                write_atomic(base / model / "mlp.csv", frame.to_csv(index=False))
    return counts
