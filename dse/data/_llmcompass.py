"""LLMCompass (PrincetonUniversity/LLMCompass) A100 micro-benchmarks -> gemm, softmax, layernorm,
gelu.

`llmcompass/ae/figure5/*/real_hardware/<op>_A100.csv`, no header rows:
- matmul: `M, N, K, <latency>ms, <throughput>Tflops` (C[M,N] = A[M,K] @ B[K,N]);
- softmax / layernorm: `M, N, throughput` in G elements/s over an M x N tensor;
- gelu: `M, throughput` in G elements/s over M elements.
fp16 on an A100 (the 80GB SXM part assumed). The transformer*.csv files carry latencies without
their shapes and are not read.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from dse.data import _common as c
from dse.errors import DataError
from dse.spec.hardware import shipped_gpu

SOURCE = "llmcompass"
FOLDER = "llmcompass"
_OPS = {"matmul": "gemm", "softmax": "softmax", "layernorm": "layernorm", "gelu": "gelu"}
_NCOLS = {"gemm": 5, "softmax": 3, "layernorm": 3, "gelu": 2}
_UNIT = re.compile(r"^\s*([-+0-9.eE]+)\s*([A-Za-z]*)\s*$")


def _peak_fp16(gpu: str) -> float:
    """Dense fp16 tensor-core peak of a shipped registry GPU (upstream also has MI210 files: 5
    PFLOP/s bound for GPUs outside the registry, still 1000x below a ms-vs-s slip; a profiled
    device's one measured GEMM peak is not a bound for its other kernels)."""
    sheet = shipped_gpu(gpu)
    return 5e15 if sheet is None else sheet.peak_bf16_flops_per_s


def _with_unit(values: pd.Series, unit: str, file: str, column: str) -> np.ndarray:
    """Parse '0.1900ms' / '101.7Tflops' style cells; the unit must be the expected one."""
    out = np.empty(len(values))
    for i, cell in enumerate(values.astype(str)):
        m = _UNIT.match(cell)
        if not m or (m[2] and m[2].lower() != unit.lower()):
            raise DataError(
                f"{file}: {column} row {i}: cannot parse {cell!r} as a number in {unit}"
            )
        out[i] = float(m[1])
    return out


def _read(path: Path, root: Path, kind: str) -> pd.DataFrame | None:
    file = c.rel(path, root)
    raw = c.read_csv(path, file, header=None, skipinitialspace=True, dtype=str)
    if raw.empty:
        return None  # no bytes: no measurements
    if raw.shape[1] != _NCOLS[kind]:
        raise DataError(f"{file}: expected {_NCOLS[kind]} columns for {kind}, got {raw.shape[1]}")
    gpu = c.normalise_gpu(path.stem.rsplit("_", 1)[-1])
    df = pd.DataFrame(
        {
            "source": SOURCE,
            "gpu": gpu,
            "engine": "pytorch",
            "engine_version": "unknown",
            "kind": kind,
            "dtype": "float16",
            "file": file,
        },
        index=range(len(raw)),
    )
    if kind == "gemm":
        names = ["M", "N", "K"]
        dims = {}
        for j, name in enumerate(names):
            raw[j] = raw[j].str.strip()
            v = c.numeric(raw, j, file)
            c.check_positive(v, name, file)
            dims[name] = v
        latency_s = _with_unit(raw[3], "ms", file, "latency") / 1000.0
        c.check_positive(latency_s, "latency", file)
        tflops = _with_unit(raw[4], "Tflops", file, "throughput")
        flops = 2.0 * dims["M"] * dims["N"] * dims["K"]
        # the two columns must agree (latency is rounded to 0.1 us)
        ratio = flops / latency_s / (tflops * 1e12)
        c.check_range(ratio, 0.97, 1.03, "2MNK / latency / throughput", file)
        c.check_peak_rate(
            flops, latency_s, c.rate_floor(gpu, 1e12), 1.3 * _peak_fp16(gpu), "FLOP/s", file
        )
        # LLMCompass: C[M,N] = A[M,K] @ B[K,N] -> aiconfigurator's m = M tokens, n = N, k = K
        df["m"] = dims["M"].astype(np.int64)
        df["n"] = dims["N"].astype(np.int64)
        df["k"] = dims["K"].astype(np.int64)
        df["kernel_source"] = "torch.matmul"
        df["latency_s"] = latency_s
        df["throughput_flops_per_s"] = tflops * 1e12
    else:
        for j in range(raw.shape[1]):
            raw[j] = raw[j].str.strip()
        m = c.numeric(raw, 0, file)
        c.check_positive(m, "M", file)
        if kind == "gelu":
            n = np.ones_like(m)
            tput = c.numeric(raw, 1, file)
        else:
            n = c.numeric(raw, 1, file)
            c.check_positive(n, "N", file)
            tput = c.numeric(raw, 2, file)
        c.check_positive(tput, "throughput", file)
        elements = m * n
        tput_el_s = tput * 1e9  # G elements/s -> elements/s
        # fp16 in + out at <= ~2 TB/s is <= 0.5e12 elements/s; allow 4x
        c.check_range(tput_el_s, 1e6, 2e12, "throughput (elements/s, after G -> 1)", file)
        df["m"] = m.astype(np.int64)
        if kind != "gelu":
            df["n"] = n.astype(np.int64)
        df["elements"] = elements.astype(np.int64)
        df["throughput_elements_per_s"] = tput_el_s
        df["latency_s"] = elements / tput_el_s
    df["power_w"] = np.nan
    df["energy_j"] = np.nan
    return c.finish(df)


def read_llmcompass(root: Path | str) -> dict[str, pd.DataFrame]:
    """LLMCompass real-hardware micro-benchmarks keyed by kind (gemm, softmax, layernorm, gelu)."""
    root = Path(root)
    base = root / FOLDER
    if not base.is_dir():
        return {}
    out: dict[str, list[pd.DataFrame]] = {}
    for path in sorted(base.rglob("real_hardware/*.csv")):
        op = path.stem.rsplit("_", 1)[0].lower()
        kind = _OPS.get(op)
        table = _read(path, root, kind) if kind is not None else None
        if table is not None:
            c.add_table(out, kind, table)
    return c.merge_kinds(out)
