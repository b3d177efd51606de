"""argonne (argonne-lcf/LLM-Inference-Bench) end-to-end static batches -> e2e, e2e_energy.

- `argonne/Plots/All_results.csv`: `Batch Size` prompts, input = output = `Input Output Length`
  tokens, on `Num of Hardware` GPUs (tensor parallel); `Latency` is seconds for the whole batch,
  `Throughput` tokens/s counting input and output tokens.
- `argonne/Plots/Fig_16_a_b/power_results.csv`: the same columns plus `avg_power` in
  **milliwatts, GPU 0 only**; energy of the batch on that one GPU = latency_s * power_w.
- `argonne/Plots/Fig_22/all_results_TTFT_ITL.csv` -> e2e_ttft: `TTFT Latency` (seconds to the
  first token of a static batch of `Batch Size` prompts of `Input Length` tokens) and
  `end_latency` (seconds for the whole run; it equals All_results' `Latency` of the same
  configuration with output = input length, so the TTFT is that run's first token).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c

SOURCE = "argonne"
FOLDER = "argonne"
E2E_FILE = "Plots/All_results.csv"
POWER_FILE = "Plots/Fig_16_a_b/power_results.csv"
TTFT_FILE = "Plots/Fig_22/all_results_TTFT_ITL.csv"

# Hardware column -> registry name (other vendors: lowercase slug of the model name).
_HARDWARE = {
    "nvidia h100 gpu": "h100_sxm",  # SXM 80GB HBM3 (README)
    # ALCF Polaris nodes: 4 x A100-SXM4-40GB; no A100 run here uses more than 4 GPUs.
    "nvidia a100 gpu": "a100_sxm_40gb",
    "nvidia gh200 gpu": "gh200",
    "amd mi250 gpu": "mi250",
    "amd mi300x gpu": "mi300x",
    "intel pvc gpu": "pvc",
    "intel max 1550": "max1550",
    "habana gaudi2": "gaudi2",
    "sambanova sn40l": "sn40l",
}
_ENGINES = {
    "vllm": "vllm",
    "tensorrt-llm": "trtllm",
    "llama.cpp": "llama.cpp",
    "deepspeed": "deepspeed",
    "deepspeed-mii": "deepspeed-mii",
    "sambaflow": "sambaflow",
}
_COLUMNS = (
    "Hardware",
    "Num of Hardware",
    "Framework",
    "Model",
    "Input Output Length",
    "Batch Size",
    "Latency",
    "Throughput",
)
_POWER_RANGE_W = (30.0, 1000.0)
_TTFT_COLUMNS = (
    "Hardware",
    "Num of Hardware",
    "Framework",
    "Model",
    "Input Length",
    "Output Length",
    "Batch Size",
    "TTFT Latency",
    "end_latency",
)


def _hardware(name: str) -> str:
    key = " ".join(str(name).strip().lower().split())
    if key in _HARDWARE:
        return _HARDWARE[key]
    words = [w for w in key.split() if w not in ("nvidia", "amd", "intel", "gpu")]
    return c.normalise_gpu("_".join(words) or key)


def _read(path: Path, root: Path, kind: str) -> pd.DataFrame | None:
    file = c.rel(path, root)
    raw = c.read_csv(path, file, skipinitialspace=True)
    if raw.empty:
        return None  # header only: no measurements
    raw.columns = [str(col).strip() for col in raw.columns]
    required = (*_COLUMNS, "avg_power") if kind == "e2e_energy" else _COLUMNS
    c.require_columns(raw, required, file)
    latency_s = c.numeric(raw, "Latency", file)
    c.check_positive(latency_s, "Latency", file)
    # a static batch of <= 256 prompts x <= 2 x 2048 tokens: 10 ms .. 1 day
    c.check_range(latency_s, 1e-2, 86400.0, "Latency (s)", file)
    n_gpus = c.numeric(raw, "Num of Hardware", file)
    c.check_positive(n_gpus, "Num of Hardware", file)
    length = c.numeric(raw, "Input Output Length", file)
    c.check_positive(length, "Input Output Length", file)
    batch = c.numeric(raw, "Batch Size", file)
    c.check_positive(batch, "Batch Size", file)
    tput = c.numeric(raw, "Throughput", file)
    c.check_positive(tput, "Throughput", file)
    engine = raw["Framework"].astype(str).str.strip().str.lower()
    df = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": [_hardware(h) for h in raw["Hardware"]],
            "engine": engine.map(lambda e: _ENGINES.get(e, e)).to_numpy(),
            "engine_version": "unknown",
            "kind": kind,
            "dtype": "float16",  # README: argonne runs are fp16
            "file": file,
            "latency_s": latency_s,
            "model": raw["Model"].astype(str).str.strip().to_numpy(),
            "hardware": raw["Hardware"].astype(str).to_numpy(),
            "batch_size": batch.astype(np.int64),
            "input_tokens": length.astype(np.int64),
            "output_tokens": length.astype(np.int64),
            "n_gpus": n_gpus.astype(np.int64),
            "throughput_tok_s": tput,
        }
    )
    # `Throughput` should be batch x (input + output) / latency; llama.cpp rows with batch > 1
    # report it per sequence (off by exactly the batch size). Flag rather than rewrite.
    expected = batch * 2.0 * length / latency_s
    df["throughput_counts_batch"] = np.isclose(tput, expected, rtol=0.02)
    if kind == "e2e_energy":
        power_w = c.numeric(raw, "avg_power", file) / 1000.0  # mW -> W
        c.check_positive(power_w, "avg_power", file)
        c.check_range(power_w, *_POWER_RANGE_W, "avg_power (W, after mW -> W)", file)
        df["power_w"] = power_w
        df["energy_j"] = latency_s * power_w  # GPU 0 only
    else:
        df["power_w"] = np.nan
        df["energy_j"] = np.nan
    return c.finish(df, extra_order=("model", "batch_size", "input_tokens", "output_tokens"))


def _read_ttft(path: Path, root: Path) -> pd.DataFrame | None:
    """Fig. 22: time to first token per configuration (`latency_s` = TTFT)."""
    file = c.rel(path, root)
    raw = c.read_csv(path, file, skipinitialspace=True)
    if raw.empty:
        return None  # header only: no measurements
    raw.columns = [str(col).strip() for col in raw.columns]
    c.require_columns(raw, _TTFT_COLUMNS, file)
    ttft_s = c.numeric(raw, "TTFT Latency", file)
    c.check_positive(ttft_s, "TTFT Latency", file)
    # prefill of <= 256 prompts x <= 2048 tokens: 1 ms .. 10 min (seconds, not milliseconds)
    c.check_range(ttft_s, 1e-3, 600.0, "TTFT Latency (s)", file)
    # end_latency is empty for some rows (GH200 TensorRT-LLM): NaN, not an error.
    end_s = pd.to_numeric(raw["end_latency"], errors="coerce").to_numpy(float)
    ints = {}
    for col in ("Num of Hardware", "Input Length", "Output Length", "Batch Size"):
        v = c.numeric(raw, col, file)
        c.check_positive(v, col, file)
        ints[col] = v.astype(np.int64)
    engine = raw["Framework"].astype(str).str.strip().str.lower()
    df = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": [_hardware(h) for h in raw["Hardware"]],
            "engine": engine.map(lambda e: _ENGINES.get(e, e)).to_numpy(),
            "engine_version": "unknown",
            "kind": "e2e_ttft",
            "dtype": "float16",
            "file": file,
            "latency_s": ttft_s,
            "model": raw["Model"].astype(str).str.strip().to_numpy(),
            "hardware": raw["Hardware"].astype(str).to_numpy(),
            "batch_size": ints["Batch Size"],
            "input_tokens": ints["Input Length"],
            "output_tokens": ints["Output Length"],
            "n_gpus": ints["Num of Hardware"],
            "end_latency_s": end_s,
        }
    )
    return c.finish(df, extra_order=("model", "batch_size", "input_tokens", "output_tokens"))


def read_argonne(root: Path | str) -> dict[str, pd.DataFrame]:
    """argonne e2e (All_results.csv), e2e_energy (power_results.csv) and e2e_ttft (Fig. 22)
    tables."""
    root = Path(root)
    base = root / FOLDER
    got: dict[str, pd.DataFrame | None] = {}
    if (base / E2E_FILE).is_file():
        got["e2e"] = _read(base / E2E_FILE, root, "e2e")
    if (base / POWER_FILE).is_file():
        got["e2e_energy"] = _read(base / POWER_FILE, root, "e2e_energy")
    if (base / TTFT_FILE).is_file():
        got["e2e_ttft"] = _read_ttft(base / TTFT_FILE, root)
    return {kind: table for kind, table in got.items() if table is not None}
