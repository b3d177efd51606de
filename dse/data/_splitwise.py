"""splitwise (Mutinifni/splitwise-sim) performance model data -> splitwise.

`splitwise/data/perf_model.csv`: Llama-2-70B (TP 2/4/8) and BLOOM-176B (TP 8) on DGX-A100 and
DGX-H100 (`h100-80gb-pcap`: the same machine under a power cap). `prompt_time` is ms for the whole
prefill of batch x prompt_size tokens, `token_time` ms per decode step, `e2e_time` ms for the
request. `peak_power` / `average_power` are normalised (fraction of a reference power that the
source does not state) and non-zero only for A100 rows: kept as `*_norm`, never as watts.
Several rows repeat one configuration; decode is dominated by software overhead, so consumers
should use per-configuration medians.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c

SOURCE = "splitwise"
FOLDER = "splitwise"
FILE = "data/perf_model.csv"
_COLUMNS = (
    "model",
    "hardware",
    "prompt_size",
    "batch_size",
    "token_size",
    "prompt_time",
    "token_time",
    "e2e_time",
    "tensor_parallel",
)
_MODELS = {"llama2-70b": "meta-llama/Llama-2-70b-hf", "bloom-176b": "bigscience/bloom"}


def _hardware(name: str) -> tuple[str, bool]:
    """('a100-80gb' -> a100_sxm, 'h100-80gb-pcap' -> h100_sxm with a power cap)."""
    key = str(name).strip().lower()
    capped = key.endswith("-pcap")
    base = key.removesuffix("-pcap")
    gpu = {"a100-80gb": "a100_sxm", "h100-80gb": "h100_sxm"}.get(base, c.normalise_gpu(base))
    return gpu, capped


def read_splitwise(root: Path | str) -> dict[str, pd.DataFrame]:
    """splitwise perf_model.csv as kind `splitwise` (times in seconds)."""
    root = Path(root)
    path = root / FOLDER / FILE
    if not path.is_file():
        return {}
    file = c.rel(path, root)
    raw = c.read_csv(path, file, skipinitialspace=True)
    if raw.empty:
        return {}  # header only: no measurements
    c.require_columns(raw, _COLUMNS, file)
    times = {}
    for col in ("prompt_time", "token_time", "e2e_time"):
        v = c.numeric(raw, col, file) / 1000.0  # ms -> s
        c.check_positive(v, col, file)
        times[col] = v
    # a decode step of a 70B+ model: 1 ms .. 10 s; a whole request: 10 ms .. 1 h
    c.check_range(times["token_time"], 1e-3, 10.0, "token_time (s, after ms -> s)", file)
    c.check_range(times["e2e_time"], 1e-2, 3600.0, "e2e_time (s, after ms -> s)", file)
    ints = {}
    for col in ("prompt_size", "batch_size", "token_size", "tensor_parallel"):
        v = c.numeric(raw, col, file)
        c.check_positive(v, col, file)
        ints[col] = v.astype(np.int64)
    hw = [_hardware(h) for h in raw["hardware"]]
    df = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": [g for g, _ in hw],
            "engine": "unknown",  # the CSV does not name the serving stack
            "engine_version": "unknown",
            "kind": "splitwise",
            "dtype": "float16",
            "file": file,
            "latency_s": times["e2e_time"],
            "power_w": np.nan,
            "energy_j": np.nan,
            "model": [_MODELS.get(m, m) for m in raw["model"].astype(str).str.strip()],
            "model_name": raw["model"].astype(str).to_numpy(),
            "hardware": raw["hardware"].astype(str).to_numpy(),
            "power_capped": [p for _, p in hw],
            "tensor_parallel": ints["tensor_parallel"],
            "n_gpus": ints["tensor_parallel"],
            "batch_size": ints["batch_size"],
            "prompt_tokens": ints["prompt_size"],
            "output_tokens": ints["token_size"],
            "prompt_time_s": times["prompt_time"],
            "token_time_s": times["token_time"],
            "e2e_time_s": times["e2e_time"],
        }
    )
    for col in ("peak_power", "average_power"):
        if col in raw.columns:
            v = c.numeric(raw, col, file)
            c.check_range(v, 0.0, 2.0, f"{col} (normalised, expected a fraction)", file)
            df[f"{col}_norm"] = np.where(v > 0, v, np.nan)  # 0 = not measured
    return {"splitwise": c.finish(df, extra_order=("model", "tensor_parallel", "batch_size"))}
