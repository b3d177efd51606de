"""ml-energy leaderboard v2 (ml-energy/leaderboard-v2) serving runs -> serving_energy.

Layout: `ml-energy-v2/data/llm_text_generation/{chat,code}/<gpu>/<org>/<model>/
bs<max_batch>+tp<N>+pp<P>.json`, vLLM 0.4.2 with continuous batching on ShareGPT prompts.
`Energy/req (J)` is steady-state energy summed over all GPUs per request; `Avg TPOT (s)` the mean
time per output token of one request. Input lengths were not recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c
from dse.errors import DataError

SOURCE = "ml-energy-v2"
FOLDER = "ml-energy-v2"
_KEYS = (
    "Model",
    "GPU",
    "TP",
    "PP",
    "Energy/req (J)",
    "Avg TPOT (s)",
    "Token tput (tok/s)",
    "Avg Output Tokens",
    "Avg BS (reqs)",
    "Max BS (reqs)",
)
_POWER_PER_GPU_RANGE_W = (30.0, 1000.0)


def _number(record: dict, key: str, file: str) -> float:
    try:
        value = float(record[key])
    except (TypeError, ValueError):
        raise DataError(f"{file}: {key!r} must be a number, got {record[key]!r}") from None
    if not np.isfinite(value) or value <= 0:
        raise DataError(f"{file}: {key!r} must be a finite number > 0, got {value!r}")
    return value


def _read(path: Path, root: Path, task: str) -> dict:
    file = c.rel(path, root)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"{file}: cannot parse JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise DataError(f"{file}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in _KEYS if k not in record]
    if missing:
        raise DataError(f"{file}: missing key(s) {', '.join(missing)}")
    nums = {k: _number(record, k, file) for k in _KEYS if k not in ("Model", "GPU")}
    tp, pp = int(nums["TP"]), int(nums["PP"])
    n_gpus = tp * pp
    energy_req = nums["Energy/req (J)"]
    out_tokens = nums["Avg Output Tokens"]
    tpot = nums["Avg TPOT (s)"]
    tput = nums["Token tput (tok/s)"]
    c.check_range(np.array([tpot]), 1e-4, 10.0, "'Avg TPOT (s)'", file)
    energy_per_token = energy_req / out_tokens
    # mean power summed over GPUs = J per output token x output tokens per second
    power_w = energy_per_token * tput
    c.check_range(
        np.array([power_w / n_gpus]),
        *_POWER_PER_GPU_RANGE_W,
        "mean power per GPU (W) = Energy/req / Avg Output Tokens x Token tput / (TP x PP)",
        file,
    )
    return {
        "source": SOURCE,
        "gpu": c.normalise_gpu(record["GPU"]),
        "engine": "vllm",
        "engine_version": "0.4.2",
        "kind": "serving_energy",
        "dtype": "bfloat16",  # vLLM `auto` dtype: the checkpoints' bf16 weights
        "file": file,
        "latency_s": tpot,
        "power_w": power_w,
        "energy_j": energy_req,
        "task": task,
        "model": str(record["Model"]),
        "n_gpus": n_gpus,
        "tensor_parallel": tp,
        "pipeline_parallel": pp,
        "max_batch_size": int(nums["Max BS (reqs)"]),
        "energy_per_request_j": energy_req,
        "avg_output_tokens": out_tokens,
        "avg_batch_size": nums["Avg BS (reqs)"],
        "token_throughput_tok_s": tput,
        "energy_per_output_token_j": energy_per_token,
        "power_per_gpu_w": power_w / n_gpus,
        "device": str(record["GPU"]),
    }


def read_ml_energy(root: Path | str) -> dict[str, pd.DataFrame]:
    """ml-energy-v2 serving runs (one row per JSON file) as kind `serving_energy`."""
    root = Path(root)
    base = root / FOLDER / "data" / "llm_text_generation"
    if not base.is_dir():
        return {}
    rows = []
    for task_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        # <task>/<gpu>/<org>/<model>/<config>.json; models.json beside the GPU folders is metadata
        for path in sorted(task_dir.glob("*/*/*/*.json")):
            rows.append(_read(path, root, task_dir.name))
    if not rows:
        return {}
    return {"serving_energy": c.finish(pd.DataFrame(rows), extra_order=("task", "model"))}
