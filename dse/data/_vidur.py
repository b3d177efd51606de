"""vidur (microsoft/vidur) profiling CSVs -> layer_op (per-operator times) and allreduce tables.

Layouts:
- `vidur/data/profiling/compute/<gpu>/<org>/<model>/<name>.csv` (`mlp.csv`; `attention.csv` where
  present): one row per (shape, tensor-parallel size) with `time_stats.<op>.{min,max,mean,median,
  std}` in **milliseconds** of GPU kernel time for one layer's op, fp16. Melted to one row per
  (file, row, op).
- `vidur/data/profiling/network/<cluster>/<collective>.csv`: NCCL collectives, `size` in bytes
  (vidur writes elements x 2), `time_stats.<collective>.*` in milliseconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c
from dse.errors import DataError
from dse.spec.hardware import shipped_gpu

SOURCE = "vidur"
FOLDER = "vidur"
ENGINE = "pytorch"  # vidur profiles its own PyTorch model code (sarathi-serve kernels)
ENGINE_VERSION = "unknown"  # not recorded in the CSVs
DTYPE = "float16"

_STAT = re.compile(r"^time_stats\.(?P<op>.+)\.(?P<stat>min|max|mean|median|std)$")
# vidur column -> our column (shape of the model in the row)
_RENAME = {
    "n_head": "n_heads",
    "n_q_head": "n_heads",
    "n_kv_head": "n_kv_heads",
    "n_embd": "d_model",
    "n_expanded_embd": "d_ff",
    "use_gated_mlp": "gated_mlp",
    "num_tensor_parallel_workers": "tensor_parallel",
}
_REQUIRED_MLP = ("n_head", "n_kv_head", "n_embd", "num_tokens", "num_tensor_parallel_workers")
_REQUIRED_ATTENTION = ("n_embd", "n_kv_head", "batch_size", "num_tensor_parallel_workers")
_LATENCY_RANGE_S = (1e-7, 100.0)
# network/<cluster>/<name>.csv files that hold collectives (upstream also misfiles an
# attention.csv under network/a40_pairwise_nvlink: skipped)
_COLLECTIVES = ("all_reduce", "send_recv", "all_gather", "reduce_scatter")


def _read_csv(path: Path, file: str) -> pd.DataFrame:
    df = c.read_csv(path, file)
    return df.drop(columns=[col for col in df.columns if str(col).startswith("Unnamed")])


def _stat_columns(df: pd.DataFrame, file: str) -> dict[str, dict[str, str]]:
    """{op: {stat: column}} for every time_stats column; each op must have a median."""
    ops: dict[str, dict[str, str]] = {}
    for col in df.columns:
        m = _STAT.match(str(col))
        if m:
            ops.setdefault(m["op"], {})[m["stat"]] = col
    if not ops:
        raise DataError(f"{file}: no time_stats.<op>.<stat> columns found")
    for op, stats in ops.items():
        if "median" not in stats:
            raise DataError(f"{file}: missing column time_stats.{op}.median")
    return ops


def vidur_gpu(name: str) -> str:
    # compute/<gpu>: a100, h100, a40; network/<cluster>: a100_dgx, h100_pairwise_nvlink, ...
    return c.normalise_gpu(re.split(r"[_\-]", name.strip().lower(), maxsplit=1)[0])


def _melt(
    df: pd.DataFrame, ops: dict[str, dict[str, str]], file: str
) -> tuple[pd.DataFrame, np.ndarray]:
    """One row per (row, op): shape columns repeated, stats converted ms -> s."""
    stat_cols = {col for stats in ops.values() for col in stats.values()}
    shape = df[[col for col in df.columns if col not in stat_cols]]
    parts = []
    for op, stats in ops.items():
        part = shape.copy()
        part.insert(0, "op", op)
        part["row"] = np.arange(len(df))
        for stat, col in stats.items():
            values = c.numeric(df, col, file) / 1000.0  # ms -> s
            part[f"latency_{stat}_s"] = values
        parts.append(part)
    long = pd.concat(parts, ignore_index=True)
    median = long["latency_median_s"].to_numpy()
    return long, median


def _read_compute(path: Path, root: Path) -> pd.DataFrame | None:
    file = c.rel(path, root)
    parts = path.relative_to(root).parts
    # .../compute/<gpu>/<org>/<model>/<table>.csv, or .../compute/<gpu>/<model>/<table>.csv
    at = parts.index("compute")
    under = parts[at + 1 : -1]
    gpu_dir, model = under[0], "/".join(under[1:])
    raw = _read_csv(path, file)
    if raw.empty:
        return None  # header only: no measurements
    ops = _stat_columns(raw, file)
    # attention.csv rows are keyed by batch / chunk / cache size, mlp.csv rows by num_tokens
    is_attention = "num_tokens" not in raw.columns
    c.require_columns(raw, _REQUIRED_ATTENTION if is_attention else _REQUIRED_MLP, file)
    long, median = _melt(raw, ops, file)
    # An op vidur did not time for a row (every stat empty) is not a measurement: drop it. A
    # median missing while other stats are present is a broken row.
    stats_present = long[[col for col in long.columns if col.startswith("latency_")]].notna()
    measured = stats_present.any(axis=1).to_numpy()
    partial = measured & np.isnan(median)
    if partial.any():
        i = int(np.flatnonzero(partial)[0])
        raise DataError(
            f"{file}: time_stats.{long['op'].iloc[i]}.median is empty at row "
            f"{int(long['row'].iloc[i])} while its other stats are present"
        )
    bad = measured & (median <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(
            f"{file}: time_stats.{long['op'].iloc[i]}.median must be > 0, got "
            f"{median[i] * 1000:g} ms at row {int(long['row'].iloc[i])}"
        )
    long = long[measured].reset_index(drop=True)
    if long.empty:
        raise DataError(f"{file}: every time_stats median is empty")
    long = long.rename(columns=_RENAME)
    lat = long["latency_median_s"].to_numpy()
    c.check_range(lat, *_LATENCY_RANGE_S, "time_stats median (s, after ms -> s)", file)
    gpu = vidur_gpu(gpu_dir)
    out = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": gpu,
            "engine": ENGINE,
            "engine_version": ENGINE_VERSION,
            "kind": "layer_op",
            "dtype": DTYPE,
            "file": file,
            "latency_s": lat,
            "power_w": np.nan,
            "energy_j": np.nan,
            "model": model,
            "table": path.stem,
        }
    )
    long = long.drop(columns=["latency_median_s"])
    for col in long.columns:
        out[col] = long[col].to_numpy()
    if "gated_mlp" in out.columns:
        out["gated_mlp"] = out["gated_mlp"].astype(str).str.lower().isin(["true", "1", "1.0"])
    for col in ("num_tokens", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
        if col in out.columns:
            out[col] = pd.to_numeric(out[col], errors="coerce")
    if not is_attention:
        _check_gemm_rate(out, gpu, file)
    return c.finish(out, extra_order=("op", "model", "num_tokens", "d_model"))


def _check_gemm_rate(out: pd.DataFrame, gpu: str, file: str) -> None:
    """Best FLOP/s of the projection GEMMs must be physically possible (catches ms vs s)."""
    need = {"num_tokens", "d_model", "n_heads", "n_kv_heads", "d_ff", "tensor_parallel"}
    if not need <= set(out.columns):
        return
    t = out["num_tokens"].to_numpy(float)
    d = out["d_model"].to_numpy(float)
    hd = d / out["n_heads"].to_numpy(float)
    tp = out["tensor_parallel"].to_numpy(float)
    ff = out["d_ff"].to_numpy(float)
    gated = out["gated_mlp"].to_numpy(bool) if "gated_mlp" in out else np.zeros(len(out), bool)
    qkv = d + 2 * out["n_kv_heads"].to_numpy(float) * hd
    fan_out = {
        "attn_pre_proj": (d, qkv),
        "attn_post_proj": (d, d),
        "mlp_up_proj": (d, ff * np.where(gated, 2.0, 1.0)),
        "mlp_down_proj": (ff, d),
    }
    op = out["op"].to_numpy()
    flops = np.full(len(out), np.nan)
    for name, (k, n) in fan_out.items():
        sel = op == name
        flops[sel] = 2.0 * t[sel] * k[sel] * n[sel] / tp[sel]
    sel = np.isfinite(flops)
    if not sel.any():
        return
    # a spec sheet's peak; not a profiled device's measured one (a square GEMM's, which these
    # projection GEMMs beat 2.6x on an AVX2 EPYC), else 5 PFLOP/s (B200 dense fp16 is ~2.3)
    sheet = shipped_gpu(gpu)
    peak = sheet.peak_bf16_flops_per_s if sheet is not None else 5e15
    c.check_peak_rate(
        flops[sel],
        out["latency_s"].to_numpy()[sel],
        c.rate_floor(gpu, 1e12),  # lower for a profiled device (dse profile, maybe a CPU)
        1.3 * peak,
        "GEMM FLOP/s",
        file,
    )


# Cluster folder spellings of one topology (upstream has both a100_pair_nvlink and
# a100_pairwise_nvlink): one name, so the all-reduce model of that topology prices both.
_CLUSTER_ALIASES = {"pair_nvlink": "pairwise_nvlink"}


def _cluster_name(folder: str) -> str:
    """`<gpu>_<topology>` with the topology spelled one way (h100_pair_nvlink -> ..._pairwise_nvlink)."""
    gpu, _, topo = folder.strip().lower().partition("_")
    topo = _CLUSTER_ALIASES.get(topo, topo)
    return f"{gpu}_{topo}" if topo else gpu


def _read_network(path: Path, root: Path) -> pd.DataFrame | None:
    file = c.rel(path, root)
    cluster = _cluster_name(path.parent.name)
    raw = _read_csv(path, file)
    if raw.empty:
        return None  # header only: no measurements
    ops = _stat_columns(raw, file)
    c.require_columns(raw, ["num_workers", "size"], file)
    if len(ops) != 1:
        raise DataError(f"{file}: expected one time_stats.<collective> group, got {sorted(ops)}")
    ((op_name, stats),) = ops.items()
    median = c.numeric(raw, stats["median"], file) / 1000.0  # ms -> s
    c.check_positive(median, f"time_stats.{op_name}.median", file)
    c.check_range(median, *_LATENCY_RANGE_S, f"time_stats.{op_name}.median (s)", file)
    size = c.numeric(raw, "size", file)
    c.check_positive(size, "size", file)
    n_gpus = c.numeric(raw, "num_workers", file)
    c.check_positive(n_gpus, "num_workers", file)
    op = raw["collective"].astype(str).to_numpy() if "collective" in raw.columns else op_name
    out = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": vidur_gpu(cluster),
            "engine": "nccl",
            "engine_version": ENGINE_VERSION,
            "kind": "allreduce",
            "dtype": DTYPE,
            "file": file,
            "latency_s": median,
            "power_w": np.nan,
            "energy_j": np.nan,
            "n_gpus": n_gpus.astype(np.int64),
            "message_bytes": size.astype(np.int64),
            "implementation": cluster,
            "op": op,
        }
    )
    for stat in ("min", "max", "mean", "std"):
        if stat in stats:
            out[f"latency_{stat}_s"] = c.numeric(raw, stats[stat], file) / 1000.0
    if "devices_per_node" in raw.columns:
        dpn = c.numeric(raw, "devices_per_node", file)
        out["devices_per_node"] = dpn.astype(np.int64)
        out["n_nodes"] = np.ceil(n_gpus / dpn).astype(np.int64)
    # algorithm bandwidth: best between 100 MB/s and 5 TB/s
    gpu = str(out["gpu"].iloc[0])
    c.check_peak_rate(size, median, c.rate_floor(gpu, 1e8), 5e12, "message bytes/s", file)
    return c.finish(out)


def read_vidur(root: Path | str) -> dict[str, pd.DataFrame]:
    """vidur compute (layer_op) and network (allreduce) tables under `root/vidur`."""
    root = Path(root)
    base = root / FOLDER
    if not base.is_dir():
        return {}
    out: dict[str, list[pd.DataFrame]] = {}
    for path in sorted(base.rglob("*.csv")):
        parts = path.relative_to(base).parts
        table = None
        kind = "layer_op"
        # compute/<gpu>/<org>/<model>/<table>.csv (a model folder without <org> is read too)
        if "compute" in parts and len(parts) - parts.index("compute") in (4, 5):
            table = _read_compute(path, root)
        elif (
            "network" in parts
            and len(parts) - parts.index("network") == 3
            and path.stem in _COLLECTIVES
        ):
            table, kind = _read_network(path, root), "allreduce"
        if table is not None:
            c.add_table(out, kind, table)
    return c.merge_kinds(out)
