"""Is a compiled kernel (numba) worth a dependency for the small MLPs and the decode quadrature?
(issue 37). Feeds docs/performance.md, "Compiled kernels: measured, not adopted".

numba is not a dependency of dse: install it apart, never into the project's environment,

    pip install --target /tmp/nb numba            # then remove /tmp/nb/numpy* (keep yours)
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 NUMBA_NUM_THREADS=1 PYTHONPATH=.:/tmp/nb \\
        taskset -c 1 python experiments/numba_kernels.py shares|ab|cold [--n 50000 --rounds 7]
        [--tanh libm|rational] [--only replay rows predict]

- `shares`: CPU time of `dse.predict.predict` spent in the MLP forward passes
  (`MLP.predict`, `_StackedMembers.outputs`) and in the decode quadrature (`decode_nodes`, the
  node-axis reductions `pricing._reduced`, `_reduced_roofs`), for a 50k all-distinct batch, a
  50k sweep-like batch and a one-row call (benchmarks/predictor_speed.py's batches); no numba.
- `ab`: the numba forward pass (`forward_nb`: one row at a time, float32 layers like the NumPy
  path; tanh from libm, or `--tanh rational`: a vectorisable rational tanh with fastmath)
  against the NumPy one, alternated round by round in one process:
  (1) the MLP calls of a real 50k all-distinct batch replayed on their own inputs, (2) one-row
  calls of each artifact MLP shape, (3) the whole `predict` with `MLP.predict` swapped for
  the kernel (50k all distinct, 50k sweep-like, one row); median of the per-round ratios, and
  the largest difference of the outputs.
- `cold`: `import numba`, the kernel's first call compiling (no cache) and loading from
  numba's on-disk cache, each in a fresh process, against `python -m dse predict` cold.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from predictor_speed import all_distinct, sweep_like  # noqa: E402

import dse.models._nn as nn  # noqa: E402
import dse.predict.pricing as pricing  # noqa: E402
import dse.predict.request as request  # noqa: E402
from dse.predict import predict  # noqa: E402

KERNEL_SRC = '''
import math
import numpy as np
from numba import njit


@njit(cache=CACHE, nogil=True, fastmath=FAST, inline="always")
def tanh_rational(x):
    """float32 tanh as Eigen's rational 13/6 minimax (a few ulp; vectorisable, libm's is not)."""
    x = min(max(x, np.float32(-7.9988117)), np.float32(7.9988117))
    x2 = x * x
    p = x2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = x2 * p + np.float32(-8.60467152213735e-11)
    p = x2 * p + np.float32(5.12229709037114e-08)
    p = x2 * p + np.float32(1.48572235717979e-05)
    p = x2 * p + np.float32(6.37261928875436e-04)
    p = x2 * p + np.float32(4.89352455891786e-03)
    q = x2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = x2 * q + np.float32(2.26843463243900e-03)
    q = x2 * q + np.float32(4.89352518554385e-03)
    return x * p / q


@njit(cache=CACHE, nogil=True, fastmath=FAST)
def forward_nb(X, mean, inv, Ws, bs, w_out, b_out, y_mean, y_scale, out):
    """One row at a time: z = (x - mean) * inv in float64, cast to float32; each hidden layer
    h = tanh(z @ W + b) in float32 (the j loop vectorises over W's contiguous rows); the
    output column summed in float32, un-scaled in float64."""
    n, k = X.shape
    width = k
    for W in Ws:
        width = max(width, W.shape[1])
    a = np.empty(width, dtype=np.float32)
    c = np.empty(width, dtype=np.float32)
    for r in range(n):
        for i in range(k):
            a[i] = np.float32((X[r, i] - mean[i]) * inv[i])
        cur = k
        for li in range(len(Ws)):
            W = Ws[li]
            b = bs[li]
            m = W.shape[1]
            for j in range(m):
                c[j] = 0.0
            for i in range(cur):
                xi = a[i]
                for j in range(m):
                    c[j] += xi * W[i, j]
            for j in range(m):
                a[j] = TANH(c[j] + b[j])
            cur = m
        s = np.float32(0.0)
        for i in range(cur):
            s += a[i] * w_out[i]
        out[r] = (np.float64(s) + b_out) * y_scale + y_mean
'''


def load_kernel(cache: bool, where: Path | None = None, tanh: str = "libm") -> Callable[..., None]:
    """The numba kernel, compiled from a file (numba caches only functions defined in one).
    `tanh`: "libm" (math.tanh, exact to float32 rounding) or "rational" (`tanh_rational`,
    with fastmath: the layer loops and tanh vectorise)."""
    where = where or Path(tempfile.mkdtemp(prefix="dse-nb-"))
    src = where / "dse_nb_kernel.py"
    fast = tanh == "rational"
    src.write_text(
        KERNEL_SRC.replace("CACHE", str(cache))
        .replace("FAST", str(fast))
        .replace("TANH", "tanh_rational" if fast else "math.tanh")
    )
    sys.path.insert(0, str(where))
    import dse_nb_kernel

    return dse_nb_kernel.forward_nb


class NumbaMLP:
    """`MLP.predict` through the numba kernel: the weights converted once per MLP."""

    def __init__(self, kernel: Callable[..., None]) -> None:
        self.kernel = kernel
        self.prepared: dict[int, tuple[Any, ...]] = {}

    def weights(self, m: nn.MLP) -> tuple[Any, ...]:
        w = self.prepared.get(id(m))
        if w is None:
            if m.activation != "tanh":
                raise NotImplementedError("the prototype runs tanh MLPs (all the artifact holds)")
            w = (
                np.asarray(m.x_mean, dtype=np.float64),
                1.0 / np.asarray(m.x_scale, dtype=np.float64),
                tuple(np.ascontiguousarray(c, dtype=np.float32) for c in m.coefs[:-1]),
                tuple(np.asarray(b, dtype=np.float32) for b in m.intercepts[:-1]),
                np.ascontiguousarray(m.coefs[-1][:, 0], dtype=np.float32),
                float(m.intercepts[-1][0]),
                float(m.y_mean),
                float(m.y_scale),
            )
            self.prepared[id(m)] = w
        return w

    def predict(self, m: nn.MLP, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[None, :]
        out = np.empty(len(X))
        self.kernel(X, *self.weights(m), out)
        return out


class Swap:
    """`MLP.predict` swapped for the kernel (and ensembles of <= 64 rows run member by member,
    not as the NumPy path's block-diagonal stack) while the context is open."""

    def __init__(self, nb: NumbaMLP) -> None:
        self.nb = nb

    def __enter__(self) -> None:
        self.saved = (nn.MLP.predict, nn.STACK_MEMBERS_ROWS)
        nb = self.nb
        nn.MLP.predict = lambda m, X: nb.predict(m, X)  # type: ignore[method-assign]
        nn.STACK_MEMBERS_ROWS = -1

    def __exit__(self, *exc: object) -> None:
        nn.MLP.predict, nn.STACK_MEMBERS_ROWS = self.saved  # type: ignore[method-assign]


def batches(n: int) -> dict[str, dict[str, np.ndarray]]:
    one = sweep_like(200, np.random.default_rng(2))
    return {
        f"all distinct {n}": all_distinct(n, np.random.default_rng(0)),
        f"sweep-like {n}": sweep_like(n, np.random.default_rng(1)),
        "one row": {k: v[:1] for k, v in one.items()},
    }


# ------------------------------------------------------------------------------------- shares
def cmd_shares(args: argparse.Namespace) -> None:
    acc: dict[str, float] = collections.defaultdict(float)

    def wrap(owner: Any, name: str, label: str) -> None:
        f = getattr(owner, name)

        def g(*a: Any, **k: Any) -> Any:
            t = time.process_time()
            try:
                return f(*a, **k)
            finally:
                acc[label] += time.process_time() - t

        setattr(owner, name, g)

    wrap(nn.MLP, "predict", "MLP forward")
    wrap(nn._StackedMembers, "outputs", "MLP forward")
    wrap(request, "decode_nodes", "decode quadrature")
    wrap(pricing, "_reduced", "decode quadrature")
    wrap(pricing, "_reduced_roofs", "decode quadrature")
    print("| batch | predict CPU ms | MLP forward | decode quadrature |\n|---|---|---|---|")
    for label, cols in batches(args.n).items():
        predict(cols)
        rows = []
        for _ in range(args.rounds):
            acc.clear()
            t = time.process_time()
            predict(cols)
            rows.append((time.process_time() - t, dict(acc)))
        tot, parts = min(rows, key=lambda r: r[0])  # the least disturbed round
        sh = {k: f"{100 * v / tot:.1f}% ({1e3 * v:.2f} ms)" for k, v in parts.items()}
        print(f"| {label} | {1e3 * tot:.2f} | {sh['MLP forward']} | {sh['decode quadrature']} |")


# ----------------------------------------------------------------------------------------- ab
def _cpu(f: Callable[[], Any], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.process_time()
        f()
        best = min(best, time.process_time() - t)
    return best


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    ok = np.isfinite(a) & np.isfinite(b)
    return float(np.max(np.abs(a[ok] - b[ok]) / np.maximum(np.abs(b[ok]), 1e-300), initial=0.0))


def cmd_ab(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    nb = NumbaMLP(load_kernel(cache=False, tanh=args.tanh))
    # record the MLP calls of a real all-distinct batch (their inputs, as the models built them)
    calls: list[tuple[nn.MLP, np.ndarray]] = []
    orig = nn.MLP.predict

    def rec(m: nn.MLP, X: np.ndarray) -> np.ndarray:
        calls.append((m, np.asarray(X)))
        return orig(m, X)

    nn.MLP.predict = rec  # type: ignore[method-assign]
    cols = all_distinct(args.n, np.random.default_rng(0))
    predict(cols)
    nn.MLP.predict = orig  # type: ignore[method-assign]
    for m, X in calls:  # compile every signature before timing
        nb.predict(m, X[:1])
    print(
        f"compile of the kernel's signatures: {time.perf_counter() - t0:.1f} s wall (incl. recording)"
    )
    rows = sum(len(X) for _, X in calls)
    print(f"replayed: {len(calls)} MLP calls, {rows} rows, of one all-distinct batch of {args.n}")

    # (1) the recorded calls, NumPy vs numba, alternated
    def np_all() -> None:
        for m, X in calls:
            orig(m, X)

    def nb_all() -> None:
        for m, X in calls:
            nb.predict(m, X)

    parts = set(args.only or ("replay", "rows", "predict"))
    if "replay" in parts:
        rel = max(_rel(nb.predict(m, X), orig(m, X)) for m, X in calls)
        absd = max(float(np.max(np.abs(nb.predict(m, X) - orig(m, X)))) for m, X in calls)
        _ab("MLP calls of the batch (replayed)", np_all, nb_all, args.rounds, 1)
        print(f"  max |numba - numpy|: {absd:.2e} (relative {rel:.2e})")

    # (2) one row of each MLP shape of the artifact
    shapes: dict[tuple[Any, ...], tuple[nn.MLP, np.ndarray]] = {}
    for m, X in calls:
        shapes.setdefault(tuple(c.shape for c in m.coefs), (m, np.ascontiguousarray(X[:1])))
    for sh, (m, X1) in shapes.items() if "rows" in parts else ():
        label = "one row, " + "-".join(str(s[0]) for s in sh) + "-1"
        _ab(
            label,
            lambda m=m, X1=X1: orig(m, X1),
            lambda m=m, X1=X1: nb.predict(m, X1),
            args.rounds,
            200,
        )

    # (3) the whole predictor with the forward pass swapped
    swap = Swap(nb)
    for label, c in batches(args.n).items() if "predict" in parts else ():
        reps = 300 if label == "one row" else 1
        with swap:
            out_nb = predict(c)
        out_np = predict(c)

        def run_nb(c: dict[str, np.ndarray] = c) -> None:
            with swap:
                predict(c)

        _ab(f"predict, {label}", lambda c=c: predict(c), run_nb, args.rounds, reps)
        keys = ("latency_s", "ttft_s", "tpot_s", "energy_j", "avg_power_w")
        diffs = {k: _rel(out_nb[k], out_np[k]) for k in keys if k in out_nb}
        print("  max relative difference: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))


def _ab(label: str, a: Callable[[], Any], b: Callable[[], Any], rounds: int, reps: int) -> None:
    """A (NumPy) and B (numba) alternated `rounds` times (the order flipped every round), each
    timed as the best of 3 (CPU time per call over `reps` calls); ratio A / B per round."""
    ta, tb, ratios = [], [], []
    for r in range(rounds):
        order = [(a, ta), (b, tb)] if r % 2 == 0 else [(b, tb), (a, ta)]
        for f, sink in order:
            sink.append(_cpu(lambda f=f: [f() for _ in range(reps)], 3) / reps)
        ratios.append(ta[-1] / tb[-1])
    print(
        f"{label}: numpy {1e3 * statistics.median(ta):.3f} ms, numba {1e3 * statistics.median(tb):.3f}"
        f" ms; speed-up median {statistics.median(ratios):.2f}x"
        f" (range {min(ratios):.2f}-{max(ratios):.2f}, {rounds} rounds)"
    )


# --------------------------------------------------------------------------------------- cold
def cmd_cold(args: argparse.Namespace) -> None:
    env = dict(os.environ)
    py = sys.executable
    cache = Path(tempfile.mkdtemp(prefix="dse-nb-cold-"))
    probe = (
        "import time, sys; t=time.perf_counter(); import numba;"
        "t1=time.perf_counter(); import numpy as np;"
        f"sys.path.insert(0, {str(REPO)!r}); from experiments.numba_kernels import load_kernel;"
        f"k=load_kernel(cache=True, where=__import__('pathlib').Path({str(cache)!r}));"
        "X=np.ones((1,13)); W=(np.ones((13,64),np.float32), np.ones((64,64),np.float32),"
        "np.ones((64,64),np.float32)); B=tuple(np.ones(64,np.float32) for _ in range(3));"
        "o=np.empty(1); t2=time.perf_counter();"
        "k(X, np.ones(13), np.ones(13), W, B, np.ones(64,np.float32), 0.0, 0.0, 1.0, o);"
        "print(f'{t1-t:.3f} {time.perf_counter()-t2:.3f}')"
    )
    cli = [py, "-m", "dse", "predict", "--gpu", "h100_sxm", "--model", "llama-3-8b", "--json"]
    rows: dict[str, list[float]] = collections.defaultdict(list)
    for r in range(args.rounds):
        for f in cache.glob("__pycache__/*"):
            if r % 2 == 0:
                f.unlink()  # even rounds compile, odd rounds load what the even round cached
        out = subprocess.run([py, "-c", probe], env=env, capture_output=True, text=True, check=True)
        imp, first = (float(x) for x in out.stdout.split())
        key = "compile" if r % 2 == 0 else "cache load"
        rows["import numba (wall s)"].append(imp)
        rows[f"first call, {key} (wall s)"].append(first)
        t = time.perf_counter()
        res = subprocess.run(cli, env=env, capture_output=True, text=True)
        rows["python -m dse predict, cold (wall s)"].append(time.perf_counter() - t)
        if res.returncode:
            print(res.stderr[-400:])
    for k, v in rows.items():
        print(f"{k}: median {statistics.median(v):.3f} (range {min(v):.3f}-{max(v):.3f}, {len(v)})")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("what", choices=("shares", "ab", "cold"))
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--tanh", choices=("libm", "rational"), default="libm", help="ab: the kernel's tanh"
    )
    p.add_argument(
        "--only", nargs="*", default=None, help="ab: parts to run (replay, rows, predict)"
    )
    args = p.parse_args()
    {"shares": cmd_shares, "ab": cmd_ab, "cold": cmd_cold}[args.what](args)


if __name__ == "__main__":
    main()
