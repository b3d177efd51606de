"""argonne end-to-end energy held out, per row: what the Level-3 power calibration's form does
to H100 (one model, power held out by batch size) and the A100 40GB (two models, held out by
model), on the rows and folds of `benchmarks/e2e_accuracy.py` (command I).

    PYTHONPATH=. python experiments/argonne_power_variants.py [--code DIR] [--data DIR]

`--code`: another checkout to price the rows with (its code and its surrogates/, e.g. the tree
before the one power path, `git archive de3e6dd`); the variants are this file's. Each variant
refits only the calibration (`dse.models.level3_power.Power3`'s terms, written out here) in the
benchmark's held-out folds on the same modelled power and held-out latency, so its energy MAPE
is the benchmark's for the shipped form. A variant that changes the artifact's calibration also
moves the serving rows (command O), which this script does not score: the journal section
"argonne H100 vLLM energy after the one power path" has those numbers. Feeds that section and
docs/accuracy.md "Energy at a glance" (the argonne H100 row). ~3 min on one core.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]

LOG_FLOOR = 1e-3  # floor of a dynamic fraction under a log (as dse.models.level3_power)
RIDGE = 1e-3


def rows(code: Path, data: Path, gpus: tuple[str, ...]) -> pd.DataFrame:
    """The benchmark's held-out energy rows priced by `code`, with the modelled power split into
    kernel energy and host gaps (`over_s`, priced at idle power)."""
    sys.path[:0] = [str(code), str(code / "benchmarks")]
    os.environ["DSE_SURROGATES"] = str(code / "surrogates")
    # imported here: the checkout's own benchmark and package, once they lead sys.path
    import e2e_accuracy as bench

    from dse.data import load

    bench.ARGS = argparse.Namespace(data=str(data), surrogates=None, no_write=True, label=None)
    seen: list[pd.DataFrame] = []
    priced = bench.model_power_w

    def spy(parts, extra, gpu_names):  # the benchmark's model_power_w, recording the parts
        over = parts["pre_overhead_s"] + parts["dec_overhead_s"]
        seen.append(pd.DataFrame({"t_s": parts["ttft_s"] + parts["decode_s"], "over_s": over}))
        return priced(parts, extra, gpu_names)

    bench.model_power_w = spy
    tables = load(data, ["e2e", "e2e_energy", "e2e_ttft"])
    out = []
    for gpu in gpus:
        seen.clear()
        base = bench.level12(gpu)
        lat = bench.latency_cv(gpu, tables["e2e"], base, tables.get("e2e_ttft"))
        en = bench.energy_cv(gpu, tables, lat, base).reset_index(drop=True)
        parts = []
        for m, got in zip(en["model"].unique(), seen, strict=True):  # one call per model, in order
            got.index = np.nonzero((en["model"] == m).to_numpy())[0]
            parts.append(got)
        out.append(pd.concat([en, pd.concat(parts).sort_index()], axis=1).assign(artifact=gpu))
    return pd.concat(out, ignore_index=True)


def _log(y: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(y, LOG_FLOOR))


def _ridge(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    reg = RIDGE * np.eye(X.shape[1])
    reg[0, 0] = 0.0
    return np.linalg.solve(X.T @ X + reg, X.T @ y)


# A variant: (u, y, batch, independent, train, test, fit_protocol) -> held-out dynamic fraction.
Variant = Callable[..., np.ndarray]


def _linear(protocol: str = "add", batch_term: bool = True, k1_one: bool = False) -> Variant:
    """y = k0 + k1 u [+ k2 log2(B)/8], the term added (shipped), a factor, or none."""

    def f(u, y, b, ind, tr, te, fit_c):
        px = np.log2(b) / 6.0 * ind
        c = 0.0
        if protocol == "add":
            c = fit_c(y[tr] - u[tr])
            yn = y - c * px
        elif protocol == "mult":
            c = fit_c(_log(y[tr]) - _log(u[tr]))
            yn = y * np.exp(-c * px)
        else:
            yn = y
        cols = [np.ones_like(u)] + ([] if k1_one else [u])
        cols += [np.log2(b) / 8.0] if batch_term else []
        X = np.stack(cols, -1)
        target = yn - u if k1_one else yn
        k = _ridge(X[tr], target[tr])
        # not physical (k1 <= 0): the operator power model as is
        cal = u[te] if not k1_one and k[1] <= 0 else X[te] @ k + (u[te] if k1_one else 0.0)
        return cal * np.exp(c * px[te]) if protocol == "mult" else cal + c * px[te]

    return f


def _log_form(protocol: str = "mult", k1_one: bool = False) -> Variant:
    """log y = k0 + k1 log u + k2 log2(B)/8 (+ c log2(B)/6 in the log, or c added after)."""

    def f(u, y, b, ind, tr, te, fit_c):
        px = np.log2(b) / 6.0 * ind
        if protocol == "mult":
            c = fit_c(_log(y[tr]) - _log(u[tr]))
            yn = _log(y) - c * px
        else:
            c = fit_c(y[tr] - u[tr])
            yn = _log(y - c * px)
        cols = [np.ones_like(u)] + ([] if k1_one else [_log(u)]) + [np.log2(b) / 8.0]
        X = np.stack(cols, -1)
        target = yn - _log(u) if k1_one else yn
        k = _ridge(X[tr], target[tr])
        if not k1_one and k[1] <= 0:
            base = _log(u[te])
        else:
            base = X[te] @ k + (_log(u[te]) if k1_one else 0.0)
        return np.exp(base + c * px[te]) if protocol == "mult" else np.exp(base) + c * px[te]

    return f


VARIANTS: dict[str, tuple[Variant, str]] = {
    "shipped: k0 + k1 u + k2 log2(B)/8, + c log2(B)/6": (_linear(), "base"),
    "no engine term (c = 0)": (_linear(protocol="none"), "base"),
    "identity + c (k not fitted)": (
        lambda u, y, b, ind, tr, te, fit_c: (
            u[te] + fit_c(y[tr] - u[tr]) * np.log2(b[te]) / 6.0 * ind[te]
        ),
        "base",
    ),
    "no batch term: k0 + k1 u, + c": (_linear(batch_term=False), "base"),
    "k1 = 1: u + k0 + k2 log2(B)/8, + c": (_linear(k1_one=True), "base"),
    "engine term as a factor exp(c log2(B)/6)": (_linear(protocol="mult"), "base"),
    "log form: log y = k0 + k1 log u + k2 log2(B)/8 + c log2(B)/6": (_log_form(), "base"),
    "log ratio: log(y/u) = k0 + k2 log2(B)/8 + c log2(B)/6": (_log_form(k1_one=True), "base"),
    "log form, c added after": (_log_form(protocol="add"), "base"),
    "shipped form, host gaps at the kernels' power": (_linear(), "gaps"),
}


def score(x: pd.DataFrame, variant: Variant, inp: str) -> np.ndarray:
    """Held-out energy / measured - 1 per row of one artifact's rows."""
    from dse.fitting.level3 import dynamic_fraction, from_fraction, pair_keys, power_groups
    from dse.models.level3_power import fit_protocol
    from dse.spec.hardware import get_gpu

    gpus = x["gpu"].to_numpy()
    p_model = x["power_model_w"].to_numpy(float)
    if inp == "gaps":  # host gaps at the kernels' average power instead of idle
        idle = np.array([get_gpu(str(g)).idle_power_w for g in gpus])
        t, over = x["t_s"].to_numpy(float), x["over_s"].to_numpy(float)
        p_model = (p_model * t - idle * over) / (t - over)
    u = dynamic_fraction(p_model, gpus)
    y = dynamic_fraction(x["power_w"].to_numpy(float), gpus)
    b = x["batch_size"].to_numpy(float)
    ident = x["identical"].to_numpy(bool)
    keys = pair_keys(x)
    groups, _ = power_groups(x)
    held = np.full(len(x), np.nan)
    for g in np.unique(groups):
        te = groups == g
        tr = ~te

        def fit_c(resid: np.ndarray, tr: np.ndarray = tr) -> float:
            return fit_protocol(resid, b[tr], ident[tr], keys[tr])

        held[te] = variant(u, y, b, ~ident, tr, te, fit_c)
    energy = x["latency_held_s"].to_numpy(float) * from_fraction(held, gpus)
    return energy / x["energy_j"].to_numpy(float) - 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--code", default=str(REPO), help="checkout that prices the rows")
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    args = p.parse_args()
    en = rows(Path(args.code).resolve(), Path(args.data), ("h100_sxm", "a100_sxm"))
    h = en[en["artifact"] == "h100_sxm"]
    print(f"rows priced by {args.code}\n")
    print("H100 rows (engine, batch): measured W, modelled W, held-out latency error")
    for _, r in h.iterrows():
        print(
            f"  {r['engine']:6s} {int(r['batch_size']):3d}: {r['power_w']:6.1f} W, "
            f"{r['power_model_w']:6.1f} W, {100 * (r['latency_held_s'] / r['latency_s'] - 1):+5.1f}%"
        )
    perfect = np.abs(h["latency_held_s"] / h["latency_s"] - 1) * 100
    eng = h["engine"].to_numpy()
    print(
        "power perfect (measured power x held-out latency): H100 TRT-LLM / vLLM "
        f"{perfect[eng == 'trtllm'].mean():.2f} / {perfect[eng == 'vllm'].mean():.2f}%\n"
    )
    print(
        "| variant | H100 TRT-LLM | H100 vLLM | H100 per row (vLLM 1-64, TRT 1-64) | A100 TRT / vLLM |"
    )
    print("|---|---|---|---|---|")
    for name, (variant, inp) in VARIANTS.items():
        cells = []
        for art in ("h100_sxm", "a100_sxm"):
            x = en[en["artifact"] == art].reset_index(drop=True)
            err = 100 * score(x, variant, inp)
            e = x["engine"].to_numpy()
            cells.append((np.abs(err[e == "trtllm"]).mean(), np.abs(err[e == "vllm"]).mean(), err))
        (ht, hv, herr), (at, av, _) = cells
        per = " ".join(f"{v:+.1f}" for v in herr)
        print(f"| {name} | {ht:.2f}% | {hv:.2f}% | {per} | {at:.2f} / {av:.2f}% |")


if __name__ == "__main__":
    main()
