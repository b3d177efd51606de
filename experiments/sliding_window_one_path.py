"""Sliding-window attention as `dse predict` prices it against what `dse validate` scores, on
the measured windowed rows of the attention tables (issue 33 / 35, "one path").

Before 2026-12-03 the pricer priced a sliding layer without its window: the full-attention
kernel at the bounded length (prefill: isl m = min(prompt, w), run sliding_keys_sum(prompt, w) /
(m (m + 1) / 2) times; decode: kv_len min(kv_len, w)), and a window at least as long as the
sequence as full attention. `dse validate` scores a measured windowed row with its window
(`window_size`), which the latency model reads through its work and span, the H200 power head
through `POWER_INPUTS`, and SGLang's backend rule (H100: head_dim 256 with a window runs
Triton). Per table of windowed rows (vLLM H100 / H200 / B200, SGLang H100 / B200, the rows the
models fit: `default_backend_rows`, with a bf16 query as the pricer's operator), this prints the MAPE against the measurement of

- before: the bounded, count-scaled call without a window (the old pricer, emulated with the
  same model: the one-path test shows the adapter equals the model on unwindowed rows);
- now: `dse.predict.adapters.ADAPTERS` on the rows as windowed operators (the pricer since);
- validate: `dse.fitting.attention.predict_attention_rows` (+ the board limit), which "now"
  must equal, latency and power (tests/predict/test_one_path.py);

latency for every table, power and energy where measured (H200), split into rows whose window
is shorter than the sequence ("banded") and the rest ("covered").

    OMP_NUM_THREADS=1 PYTHONPATH=. DSE_SURROGATES=$PWD/surrogates \\
        python experiments/sliding_window_one_path.py --data ../shared/data
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

TABLES = [
    ("h200_sxm", "vllm"),
    ("h100_sxm", "vllm"),
    ("b200_sxm", "vllm"),
    ("h100_sxm", "sglang"),
    ("b200_sxm", "sglang"),
]


def _mape(pred: np.ndarray, true: np.ndarray) -> float:
    ok = np.isfinite(pred) & np.isfinite(true)
    return float(100.0 * np.mean(np.abs(pred[ok] / true[ok] - 1.0))) if ok.any() else np.nan


def windowed_op(rows: pd.DataFrame, kind: str):
    """The rows as one windowed attention operator, as `dse.predict.ops._sliding_core` builds."""
    from dse.predict.ops import Op

    dims = {
        "batch_size": rows["batch_size"].to_numpy(float),
        "num_heads": rows["num_heads"].to_numpy(float),
        "num_kv_heads": rows["num_kv_heads"].to_numpy(float),
        "head_dim": rows["head_dim"].to_numpy(float),
        "kv_dtype": np.where(rows["kv_cache_dtype"].astype(str).str.contains("fp8"), "fp8", "bf16"),
        "window_size": rows["window_size"].to_numpy(float),
    }
    length = "isl" if kind == "context_attention" else "kv_len"
    dims[length] = rows[length].to_numpy(float)
    n = len(rows)
    op_kind = "attention_prefill" if kind == "context_attention" else "attention_decode"
    return Op("attention/core_sliding", op_kind, "attention", np.ones(n), np.ones(n), np.ones(n),
              dims)  # fmt: skip


def before(art, name: str, kind: str, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(latency s, power W) of the old pricer's sliding-layer call (module doc)."""
    from dse.models.attention import attention_inputs
    from dse.spec.arch import sliding_keys_sum

    ins = attention_inputs(rows)
    w = rows["window_size"].to_numpy(float)
    factor = np.ones(len(rows))
    if kind == "context_attention":
        s = rows["isl"].to_numpy(float)
        m = np.minimum(s, w)
        factor = np.where(w >= s, 1.0, sliding_keys_sum(s, w) / (m * (m + 1) / 2))
        ins["isl"] = m
    else:
        s = rows["kv_len"].to_numpy(float)
        ins["kv_len"] = np.minimum(s, w)
    ins["window_size"] = np.zeros(len(rows))
    out = art.model(name).predict(**ins)
    power = out.get("power_w", np.full(len(rows), np.nan))
    return out["latency_s"] * factor, np.asarray(power, float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data")
    args = ap.parse_args()
    from dse.data import load
    from dse.fitting.attention import default_backend_rows, predict_attention_rows
    from dse.fitting.validate import _bound_kernel_energy
    from dse.models.artifact import Artifact
    from dse.predict.adapters import ADAPTERS
    from dse.roofline import board_limited_w
    from dse.spec.hardware import get_gpu

    kinds = ["context_attention", "generation_attention"]
    data = load(args.data, kinds)
    print("table | rows | latency MAPE before / now / validate | power before / now | "
          "energy before / now | max relative |now - validate| (latency, power)")  # fmt: skip
    for gpu, engine in TABLES:
        art, spec = Artifact.load(gpu), get_gpu(gpu)
        for kind in kinds:
            t = data[kind]
            t = t[(t["gpu"] == gpu) & (t["engine"] == engine) & (t["source"] == "aiconfigurator")]
            t = t[t["window_size"].fillna(0) > 0]
            if "beam_width" in t:
                t = t[t["beam_width"].fillna(1) == 1]
            if "dtype" in t:  # the pricer's attention operator carries a bf16 query
                t = t[t["dtype"].astype(str) == "bfloat16"]
            if "past_kv_len" in t:
                t = t[t["past_kv_len"].fillna(0) == 0]
            t = t[default_backend_rows(t.reset_index(drop=True), engine)].reset_index(drop=True)
            name = f"{kind}.{engine}"
            if t.empty or name not in art.names(kind):
                continue
            val = predict_attention_rows(art, kind, t)
            _bound_kernel_energy(gpu, val.index, val)
            t_val = val["latency_pred_s"].to_numpy(float)
            p_val = val["energy_pred_j"].to_numpy(float) / t_val
            price = ADAPTERS[windowed_op(t, kind).kind](
                art, windowed_op(t, kind), spec, {"engine": engine}
            )
            t_now, p_now = price.latency_s, board_limited_w(spec, price.power_w)
            t_old, p_old = before(art, name, kind, t)
            p_old = board_limited_w(spec, p_old)
            meas_t = t["latency_s"].to_numpy(float)
            meas_p = t["power_w"].to_numpy(float)
            length = t["isl" if kind == "context_attention" else "kv_len"].to_numpy(float)
            banded = t["window_size"].to_numpy(float) < length
            with np.errstate(invalid="ignore"):  # no power head: NaN power on both paths
                gap = np.nanmax(np.abs(np.r_[t_now / t_val, p_now / p_val] - 1.0))
            has_p = np.isfinite(meas_p).any()
            for label, m in (("all", np.ones(len(t), bool)), ("banded", banded),
                             ("covered", ~banded)):  # fmt: skip
                if not m.any():
                    continue
                line = (
                    f"{gpu} {engine} {kind[:3]} {label:7s} | {m.sum():6d} | "
                    f"{_mape(t_old[m], meas_t[m]):6.2f} / {_mape(t_now[m], meas_t[m]):6.2f} / "
                    f"{_mape(t_val[m], meas_t[m]):6.2f}"
                )
                if has_p:
                    e_old, e_now = p_old * t_old, p_now * t_now
                    meas_e = meas_p * meas_t
                    line += (
                        f" | {_mape(p_old[m], meas_p[m]):6.2f} / {_mape(p_now[m], meas_p[m]):6.2f}"
                        f" | {_mape(e_old[m], meas_e[m]):6.2f} / {_mape(e_now[m], meas_e[m]):6.2f}"
                    )
                if label == "all":
                    line += f" | {gap:.1e}"
                print(line, flush=True)


if __name__ == "__main__":
    main()
