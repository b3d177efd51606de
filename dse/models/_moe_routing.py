"""Token-to-expert routing of one fused-MoE call, as the statistics of the measured rank that set
its cost: routed (token, expert) slots, local experts touched, and M tiles of the grouped GEMM.

Three routings (a field of the workload; `ROUTINGS`):
- uniform (the default for a user's prediction): every token draws its k experts uniformly
  without replacement, so an expert is touched with probability 1 - (1 - k / E)^T;
  touched = E_l (1 - (1 - k / E)^T) on a rank holding E_l = E / ep experts.
- round_robin (aiconfigurator's "balanced", `collector/helper.py::balanced_logits` at commit
  095f58a): stride s = ceil(E / k); token t's j-th expert is (t + j s) mod E when T >= s, else
  floor(t s / T + j s) mod E. Deterministic: min(E, T k) experts touched globally; the measured
  rank (rank 0, experts [0, E_l)) gets the slots that land in its range, counted here exactly.
- power_law (aiconfigurator's "power_law_<alpha>", `_generate_power_law_distribution`): tokens
  per expert drawn from a power law on [1, 0.8 T] (on [0.01, 2] when T k <= E), scaled to T k
  slots, rounded, each capped at T (a token picks an expert once) and the excess and rounding
  refilled rank by rank on the emptiest experts; then the rank with the most slots is swapped to
  rank 0, the one measured. The collector averages 5 draws; here the statistics of `DRAWS` seeded
  draws are averaged (a deterministic function of the inputs, cached per distinct row).

A slot count per expert of n pays ceil(n / BM) M tiles of the grouped GEMM (`M_TILE`): the
kernel pads each expert's rows up to its tile, which is what small per-expert batches cost.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from dse.errors import DataError

ROUTINGS = ("uniform", "round_robin", "power_law")
UNIFORM, ROUND_ROBIN, POWER_LAW = 0, 1, 2
# names of each routing as data and users spell them (aiconfigurator calls round robin "balanced")
NAMES = {"uniform": UNIFORM, "random": UNIFORM, "balanced": ROUND_ROBIN, "round_robin": ROUND_ROBIN}
M_TILE = 64.0  # rows of a grouped-GEMM M tile (vLLM's Triton fused_moe BLOCK_SIZE_M at large M)
DRAWS = 8  # seeded power-law draws averaged per distinct (T, E, k, ep, alpha)


def routing_of(distribution: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(routing code per row (UNIFORM, ROUND_ROBIN, POWER_LAW), power-law exponent per row, 0
    elsewhere) from names ('uniform', 'balanced' / 'round_robin', 'power_law_<alpha>') or
    numbers (a power-law exponent; 0 = uniform)."""
    a = np.asarray(distribution)
    if a.ndim == 0 and a.dtype.kind not in "fiu":  # one routing for the batch: parse it once
        c, al = routing_of(a.reshape(1), 1)
        return np.full(n, c[0], dtype=np.int64), np.full(n, al[0])
    if a.dtype.kind in "fiu":
        alpha = np.broadcast_to(a.astype(np.float64), (n,)).copy()
        return np.where(alpha > 0, POWER_LAW, UNIFORM).astype(np.int64), alpha
    names = np.broadcast_to(a.astype(str), (n,))
    code = np.zeros(n, dtype=np.int64)
    alpha = np.zeros(n)
    for name in np.unique(names):
        at = names == name
        if name.startswith("power_law_"):
            try:
                alpha[at] = float(name.removeprefix("power_law_"))
            except ValueError:
                raise DataError(f"MoE distribution {name!r}: cannot read the exponent") from None
            code[at] = POWER_LAW
        elif name in NAMES:
            code[at] = NAMES[name]
        elif name != "":
            raise DataError(
                "MoE distribution must be 'uniform', 'balanced' (round robin) or "
                f"'power_law_<exponent>', got {name!r}"
            )
    return code, alpha


def _tiles(load: np.ndarray) -> np.ndarray:
    return np.ceil(load / M_TILE)


def uniform_stats(T: np.ndarray, k: np.ndarray, E: np.ndarray, ep: np.ndarray) -> dict:
    """Expected rank statistics under uniform routing (closed form)."""
    e_l = E / ep
    p = np.minimum(k / E, 1.0)
    # (1 - p)^T as exp(T log(1 - p)): the same number, cheaper than a power of arrays
    with np.errstate(divide="ignore"):
        miss = np.exp(T * np.log1p(-p))
    slots = T * k / ep
    touched = np.maximum(e_l * (1.0 - miss), np.minimum(slots, 1.0))
    load = slots / touched  # tokens per touched expert
    # a Binomial(T, k/E) load's tiles average about load / BM + 1/2 once it spans tiles
    tiles = touched * np.maximum(1.0, load * (1.0 / M_TILE) + 0.5)
    return {"slots": slots, "touched": touched, "tiles": tiles, "max_load": load}


def _rr_small(T: int, k: int, E: int, ep: int) -> tuple[float, float, float, float]:
    """Round robin with T < stride, enumerated (T k <= E + k pairs): rank-0 statistics."""
    s = -(-E // k)
    t = np.arange(T, dtype=np.float64)[:, None]
    j = np.arange(k, dtype=np.float64)[None, :]
    ex = np.floor(np.mod(t * s / T + j * s, E)).astype(np.int64).ravel()
    counts = np.bincount(ex[ex < E // ep], minlength=1)
    counts = counts[counts > 0]
    if counts.size == 0:
        return 0.0, 0.0, 0.0, 0.0
    return float(counts.sum()), float(counts.size), float(_tiles(counts).sum()), float(counts.max())


def round_robin_stats(T: np.ndarray, k: np.ndarray, E: np.ndarray, ep: np.ndarray) -> dict:
    """Rank-0 statistics of aiconfigurator's balanced (round-robin) routing (module doc)."""
    n = len(T)
    e_l = E / ep
    s = np.ceil(E / k)
    big = s <= T
    slots = np.zeros(n)
    touched = np.zeros(n)
    tiles = np.zeros(n)
    max_load = np.zeros(n)
    if big.any():
        # every expert touched; slot j covers the T consecutive experts from j s (mod E), so the
        # rank's count is F(j s + T) - F(j s), F(x) = floor(x / E) E_l + min(x mod E, E_l)
        Tb, kb, Eb, el = T[big], k[big], E[big], e_l[big]
        jmax = int(kb.max())
        j = np.arange(jmax, dtype=np.float64)[None, :]
        a = j * s[big][:, None]

        def F(x: np.ndarray) -> np.ndarray:
            return np.floor(x / Eb[:, None]) * el[:, None] + np.minimum(
                np.mod(x, Eb[:, None]), el[:, None]
            )

        per_j = np.where(j < kb[:, None], F(a + Tb[:, None]) - F(a), 0.0)
        slots[big] = per_j.sum(axis=1)
        touched[big] = el
        load = slots[big] / el
        # loads differ by at most about one slot per overlapping stride block
        max_load[big] = np.ceil(load)
        tiles[big] = el * _tiles(np.ceil(load))
    small = ~big
    if small.any():
        keys = np.stack([T[small], k[small], E[small], ep[small]], axis=1).astype(np.int64)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        got = np.array([_rr_small(*map(int, u)) for u in uniq]).reshape(-1, 4)[inv.ravel()]
        slots[small], touched[small], tiles[small], max_load[small] = got.T
    return {"slots": slots, "touched": touched, "tiles": tiles, "max_load": max_load}


def _water_fill(c: np.ndarray, units: np.ndarray, cap: float) -> np.ndarray:
    """Add units[r] slots to rank r's experts (rows of c), one at a time on the emptiest expert
    below `cap`: the collector's `_round_robin_adjust_per_rank`, vectorised over ranks as a
    water level found by bisection, the last units one each on the emptiest experts."""
    room = np.maximum(cap - c, 0.0)
    units = np.minimum(units, room.sum(axis=1))
    lo = c.min(axis=1)
    hi = np.full(len(c), cap)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        short = np.minimum(np.maximum(mid[:, None] - c, 0.0), room).sum(axis=1) < units
        lo = np.where(short, mid, lo)
        hi = np.where(short, hi, mid)
    new = np.minimum(np.maximum(np.floor(lo)[:, None], c), cap)
    rest = units - (new - c).sum(axis=1)
    order = np.argsort(new, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(c.shape[1])[None, :], axis=1)
    return new + ((rank < rest[:, None]) & (new < cap))


@lru_cache(maxsize=65536)
def _power_law_one(T: int, k: int, E: int, ep: int, alpha: float) -> tuple[float, ...]:
    """Rank-0 statistics of `DRAWS` seeded draws of the collector's power-law routing."""
    rng = np.random.default_rng(1000003 * T + 7919 * E + 31 * k + ep)
    e_l = E // ep
    acc = np.zeros(4)
    lo, hi = (1.0, 0.8 * T) if T * k > E else (0.01, 2.0)
    for _ in range(DRAWS):
        u = rng.random(E)
        x = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * u + lo ** (1 - alpha)) ** (1 / (1 - alpha))
        c = np.minimum(np.round(x / x.sum() * (T * k)), T).reshape(ep, e_l)
        # the overflow and the rounding error, spread rank by rank as the collector does
        # (added on the emptiest experts, or taken from the fullest)
        delta = int(T * k - c.sum())
        per = np.full(ep, abs(delta) // ep, dtype=np.float64)
        per[: abs(delta) % ep] += 1
        if delta > 0:
            c = _water_fill(c, per, float(T))
        elif delta < 0:
            c = T - _water_fill(T - c, per, float(T))
        r0 = c[np.argmax(c.sum(axis=1))]
        hit = r0[r0 > 0]
        acc += (hit.sum(), hit.size, _tiles(hit).sum(), hit.max() if hit.size else 0.0)
    return tuple(acc / DRAWS)


def power_law_stats(
    T: np.ndarray, k: np.ndarray, E: np.ndarray, ep: np.ndarray, alpha: np.ndarray
) -> dict:
    """Rank-0 statistics of the collector's power-law routing (module doc), per distinct row."""
    keys = np.stack([T, k, E, ep, alpha], axis=1)
    uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    got = np.array(
        [_power_law_one(int(a), int(b), int(c), int(d), float(e)) for a, b, c, d, e in uniq]
    ).reshape(-1, 4)[inv.ravel()]
    return dict(zip(("slots", "touched", "tiles", "max_load"), got.T, strict=True))


def routing_stats(
    T: np.ndarray,
    k: np.ndarray,
    E: np.ndarray,
    ep: np.ndarray,
    code: np.ndarray,
    alpha: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per row: slots (routed (token, expert) pairs on the rank), touched (its experts with at
    least one slot), tiles (grouped-GEMM M tiles: sum over touched experts of ceil(n / BM)) and
    max_load (slots of its busiest expert), by each row's routing."""
    out = uniform_stats(T, k, E, ep)
    for c, fn in ((ROUND_ROBIN, round_robin_stats), (POWER_LAW, power_law_stats)):
        at = code == c
        if at.any():
            args = (T[at], k[at], E[at], ep[at]) + ((alpha[at],) if c == POWER_LAW else ())
            got = fn(*args)
            for key in out:
                out[key] = out[key].copy() if not out[key].flags.writeable else out[key]
                out[key][at] = got[key]
    return out
