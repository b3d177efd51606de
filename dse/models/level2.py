"""Level 2 of HYMELL: the blocks vidur measured (attention projections, dense FFN), corrected
by a PyTorch-eager calibration of their GEMMs' Level-1 times, a residual MLP on each GEMM's
regime (arithmetic intensity, Level-1 time over the roofline, wave fill, size) fitted on every
projection GEMM vidur timed on the chip (`Level2Block`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

import numpy as np

from dse.errors import ArtifactError
from dse.models._nn import MLP
from dse.models.base import Model, RangeMiss, any_true, range_miss, within
from dse.models.threads import threaded_fit

if TYPE_CHECKING:
    from dse.spec.hardware import GPU

L2_CLIP = 0.5  # |log factor| of a Level-2 block residual is clipped here (x0.6 .. x1.65)


# ---------------------------------------------------------------------------- Level 2
# Blocks with a Level-2 residual: name -> the dse.predict.ops operators it scales. These are the blocks
# whose whole-block time is measured (vidur times every operator of a layer at real model
# shapes); attention over the KV cache and the fused MoE are measured as whole kernels already
# and priced by their own Level-1/2 models.
LEVEL2_BLOCKS: dict[str, tuple[str, ...]] = {
    "attention_proj": ("attention/qkv", "attention/rope", "attention/out"),
    "ffn_dense": ("ffn/gate_up", "ffn/act", "ffn/down"),
}
# The two projection GEMMs of each block (the op between them, RoPE / the activation, is kept at
# its Level-1 time: the layer-op models are fitted on vidur's own rows).
LEVEL2_GEMMS: dict[str, tuple[str, str]] = {
    "attention_proj": ("attention/qkv", "attention/out"),
    "ffn_dense": ("ffn/gate_up", "ffn/down"),
}
# Raw inputs of a block call: Level-1 seconds of its three operators, the GEMM sizes, and the
# chip's roofline (peak, bandwidth, SMs), from which `gemm_inputs` derives each GEMM's regime.
LEVEL2_FEATURES: tuple[str, ...] = (
    "log_t_gemm1",
    "log_t_mid",
    "log_t_gemm2",
    "log2_m",
    "log2_n1",
    "log2_k1",
    "log2_n2",
    "log2_k2",
    "log_peak_flops",
    "log_hbm_bw",
    "n_sms",
)
# Inputs of the eager GEMM calibration, per GEMM: its size, arithmetic intensity, Level-1 time
# over the roofline floor (the regime Level 1 prices it in) and the fill of its last wave.
GEMM_FEATURES: tuple[str, ...] = (
    "log2_m",
    "log2_n",
    "log2_k",
    "log_intensity",
    "log_l1_over_roof",
    "wave_fill",
)
RANGE_FEATURES: tuple[str, ...] = ("log2_tokens", "log2_d_model", "log2_width")
# `gemm_inputs` of at most this many rows in Python floats (one configuration's phases)
FEW_ROWS = 8
WAVE_TILE = 128  # a CTA tile edge: waves = ceil(m / 128) ceil(n / 128) / SMs
# `Level2Block(wave_steps=True)` (a candidate, not in the shipped artifacts): cuBLAS's eager kernel
# choice steps in the token count, so each GEMM also gets its last wave's fill and log wave count
# under three more (m, n) CTA tiles. vidur's projections per operator, each model held out (issue
# 33, benchmarks/vidur_projections.py --wave-steps): H100 7.99 -> 6.93%, A100 5.52 -> 4.80%.
STEP_TILES: tuple[tuple[int, int], ...] = ((128, 256), (256, 128), (64, 128))
STEP_FEATURES: tuple[str, ...] = tuple(
    f"{what}_{tm}x{tn}" for tm, tn in STEP_TILES for what in ("wave_fill", "log_waves")
)


class SizedOp(Protocol):
    """What `block_features` reads of an operator: its GEMM sizes (`dse.predict.ops.Op`,
    which this lower layer does not import)."""

    @property
    def dims(self) -> Mapping[str, Any]: ...


def block_features(
    times_s: Mapping[str, np.ndarray], ops: Mapping[str, SizedOp], block: str, gpu: GPU
) -> np.ndarray:
    """(n, 11) raw inputs of a block call (`LEVEL2_FEATURES`): the Level-1 seconds of one call
    of each of the block's operators (`times_s`, by operator name), the two GEMMs' sizes and
    `gpu`'s roofline."""
    g1, mid, g2 = LEVEL2_BLOCKS[block]
    a, b = ops[g1], ops[g2]
    cols = [
        *(np.log(np.maximum(np.asarray(times_s[k], dtype=float), 1e-12)) for k in (g1, mid, g2)),
        np.log2(a.dims["m"]),
        np.log2(a.dims["n"]),
        np.log2(a.dims["k"]),
        np.log2(b.dims["n"]),
        np.log2(b.dims["k"]),
    ]
    n = max(np.size(c) for c in cols)
    X = np.empty((n, len(LEVEL2_FEATURES)))
    for j, c in enumerate(cols):  # each column broadcast by assignment (scalars too)
        X[:, j] = c
    X[:, len(cols)] = np.log(gpu.peak_bf16_flops_per_s)
    X[:, len(cols) + 1] = np.log(gpu.hbm_bw_bytes_per_s)
    X[:, len(cols) + 2] = float(gpu.n_sms)
    return X


def block_features_rows(
    parts: Sequence[tuple[Mapping[str, Any], Mapping[str, SizedOp]]], block: str, gpu: GPU
) -> np.ndarray:
    """`block_features` of several one-row calls (one configuration's phases, each its
    (`times_s`, `ops`) of one value each), stacked in their order: the same rows as
    `block_features` of the phases joined, read as Python floats and their logs taken by
    numpy in one call each (not ~20 numpy calls to join the phases' arrays and ~10 on them)."""
    g1, mid, g2 = LEVEL2_BLOCKS[block]
    ln_args: list[float] = []
    log2_args: list[float] = []
    for times_s, ops in parts:
        a, b = ops[g1], ops[g2]
        ln_args += [max(_one(times_s[k]), 1e-12) for k in (g1, mid, g2)]
        log2_args += [_one(a.dims["m"]), _one(a.dims["n"]), _one(a.dims["k"])]
        log2_args += [_one(b.dims["n"]), _one(b.dims["k"])]
    ln = np.log([*ln_args, gpu.peak_bf16_flops_per_s, gpu.hbm_bw_bytes_per_s]).tolist()
    l2 = np.log2(log2_args).tolist()
    tail = [ln[-2], ln[-1], float(gpu.n_sms)]
    return np.array(
        [[*ln[3 * i : 3 * i + 3], *l2[5 * i : 5 * i + 5], *tail] for i in range(len(parts))]
    )


def _one(v: Any) -> float:
    """The one value of a one-row array (or a number) as a Python float."""
    return np.asarray(v, dtype=np.float64).item(0)


def gemm_inputs(X: np.ndarray, wave_steps: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The `GEMM_FEATURES` (`wave_steps`: and `STEP_FEATURES`) of the block's first and second
    GEMM from its raw inputs (both GEMMs as the two columns of (n, 2) arrays: the same
    element-wise arithmetic, half the numpy calls of a block)."""
    if len(X) <= FEW_ROWS:
        return _gemm_inputs_rows(X, wave_steps)
    m = np.exp2(X[:, 3:4])  # (n, 1): tokens, shared by the two GEMMs
    peak, bw, sms = np.exp(X[:, 8:9]), np.exp(X[:, 9:10]), X[:, 10:11]
    log_n, log_k = X[:, [4, 6]], X[:, [5, 7]]  # (n, 2): first GEMM, second GEMM
    n, k = np.exp2(log_n), np.exp2(log_k)
    flops, byts = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
    roof = np.maximum(flops / peak, byts / bw)
    waves = np.ceil(m / WAVE_TILE - 1e-9) * np.ceil(n / WAVE_TILE - 1e-9) / sms
    fill = waves / np.maximum(np.ceil(waves - 1e-9), 1.0)
    log_m = np.broadcast_to(X[:, 3:4], log_n.shape)
    cols = [log_m, log_n, log_k, np.log(flops / byts), X[:, [0, 2]] - np.log(roof), fill]
    for tm, tn in STEP_TILES if wave_steps else ():
        w = np.ceil(m / tm - 1e-9) * np.ceil(n / tn - 1e-9) / sms
        whole = np.maximum(np.ceil(w - 1e-9), 1.0)
        cols += [w / whole, np.log(whole)]
    feats = np.stack(cols, axis=2)  # (n, 2, 6) or (n, 2, 12)
    return feats[:, 0], feats[:, 1]


def _gemm_inputs_rows(X: np.ndarray, wave_steps: bool) -> tuple[np.ndarray, np.ndarray]:
    """`gemm_inputs` of a few rows (one configuration's phases) in Python floats: the same
    arithmetic in the same order, without ~60 numpy calls on (n, 2) arrays (~40 us a block);
    exp2 / log by `math`, which may differ from numpy's kernels in the last bit (held to the
    vectorised rule in tests/predict/test_small_call_paths.py)."""
    exp2, log, ceil = math.exp2, math.log, math.ceil
    first: list[list[float]] = []
    second: list[list[float]] = []
    for x in X.tolist():
        m = exp2(x[3])  # tokens, shared by the two GEMMs
        peak, bw, sms = math.exp(x[8]), math.exp(x[9]), x[10]
        for out, log_n, log_k, log_t in ((first, x[4], x[5], x[0]), (second, x[6], x[7], x[2])):
            n, k = exp2(log_n), exp2(log_k)
            flops, byts = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
            roof = max(flops / peak, byts / bw)
            waves = float(ceil(m / WAVE_TILE - 1e-9)) * float(ceil(n / WAVE_TILE - 1e-9)) / sms
            fill = waves / max(float(ceil(waves - 1e-9)), 1.0)
            row = [x[3], log_n, log_k, log(flops / byts), log_t - log(roof), fill]
            for tm, tn in STEP_TILES if wave_steps else ():
                w = float(ceil(m / tm - 1e-9)) * float(ceil(n / tn - 1e-9)) / sms
                whole = max(float(ceil(w - 1e-9)), 1.0)
                row += [w / whole, log(whole)]
            out.append(row)
    return np.array(first, dtype=np.float64), np.array(second, dtype=np.float64)


def block_sizes(X: np.ndarray, block: str) -> np.ndarray:
    """(n, 3) log2 tokens, d_model and the block's per-GPU width (QKV width or d_ff / tp)."""
    if block == "attention_proj":  # x[tokens, d_model] @ W_qkv[width, d_model]^T
        return X[:, _ATTENTION_SIZES]
    return X[:, _FFN_SIZES]  # down projection: x[tokens, d_ff / tp] @ W[d_model, d_ff / tp]^T


# `block_sizes`' columns of X, as index arrays (a list index is converted on every call)
_ATTENTION_SIZES = np.array([3, 5, 4])
_FFN_SIZES = np.array([3, 6, 7])


class Level2Block(Model):
    """PyTorch eager's own GEMM calibration, as the residual of a block (vidur's harness is not
    the engine whose kernels the Level-1 GEMM tables hold): a residual MLP ensemble of
    log(measured GEMM time / Level-1 GEMM time) on the GEMM's regime (`GEMM_FEATURES`), fitted
    on the projection GEMMs of every vidur model of the chip and applied to the block's two
    GEMMs; each factor is clipped to +-L2_CLIP. The op between them keeps its Level-1 time."""

    kind: ClassVar[str] = "level2_block"  # the manifest's kind; dse.models.MODEL_CLASSES
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "block": tuple(LEVEL2_BLOCKS),
        "wave_steps": (False, True),
    }

    def __init__(
        self,
        block: str = "ffn_dense",
        hidden: tuple[int, ...] = (8,),
        alpha: float = 1.0,
        n_ensemble: int = 3,
        seed: int = 0,
        wave_steps: bool = False,
    ) -> None:
        self.block = block
        self.hidden = hidden
        self.alpha = alpha
        self.n_ensemble = n_ensemble
        self.seed = seed
        self.wave_steps = wave_steps

    def gemm_features(self) -> tuple[str, ...]:
        """The names of the per-GEMM inputs the calibration reads (`gemm_inputs`)."""
        return GEMM_FEATURES + (STEP_FEATURES if self.wave_steps else ())

    @threaded_fit
    def fit(self, G: np.ndarray, log_ratio: np.ndarray, X: np.ndarray) -> Self:
        """Fit the ensemble on per-GEMM inputs `G` (`gemm_inputs` rows of any blocks) and each
        GEMM's measured log ratio to its Level-1 time; `X` (the block's raw inputs,
        `block_features`) sets the block sizes the model answers for."""
        self._validate_params()
        if G.shape[1] != len(self.gemm_features()):
            raise ValueError(
                f"Level2Block(wave_steps={self.wave_steps}): G must have "
                f"{len(self.gemm_features())} columns (`gemm_inputs(X, wave_steps)`), got "
                f"{G.shape[1]}"
            )
        from dse.models._nn import fit_mlp, merge_ensemble
        from dse.models.level3 import RESIDUAL_MLP

        mlps = [
            fit_mlp(
                G,
                log_ratio,
                hidden=self.hidden,
                alpha=self.alpha,
                seed=self.seed + k,
                **RESIDUAL_MLP,
            )
            for k in range(self.n_ensemble)
        ]
        self.mlp_ = merge_ensemble(tuple(mlps)) or mlps[0]
        sizes = block_sizes(X, self.block)
        self.range_ = {
            name: (float(sizes[:, i].min()), float(sizes[:, i].max()))
            for i, name in enumerate(RANGE_FEATURES)
        }
        return self

    def gemm_log_factors(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Clipped log factors of the block's first and second GEMM."""
        g1, g2 = gemm_inputs(X, self.wave_steps)
        # np.clip as two ufuncs (its wrapper costs more than both on a block's few rows)
        both = np.minimum(
            np.maximum(self.mlp_.predict(np.concatenate([g1, g2])), -L2_CLIP), L2_CLIP
        )
        return both[: len(X)], both[len(X) :]

    def log_factor(self, X: np.ndarray) -> np.ndarray:
        """Log of the block's calibrated time over its Level-1 time."""
        f1, f2 = self.gemm_log_factors(X)
        t1, tm, t2 = np.exp(X[:, 0]), np.exp(X[:, 1]), np.exp(X[:, 2])
        return np.log((t1 * np.exp(f1) + tm + t2 * np.exp(f2)) / (t1 + tm + t2))

    def in_token_blocks(self, X: np.ndarray) -> np.ndarray:
        """The inputs of a block call with more tokens than the block was fitted on, read as
        ceil(tokens / most fitted) equal row blocks inside the range: each with its share of
        the tokens and of the Level-1 times (the factors of one apply to all of them, as the
        Level-1 GEMM tables price a tall GEMM as row blocks)."""
        hi = self.range_["log2_tokens"][1]
        if len(X) <= FEW_ROWS:  # a few rows: one Python comparison per row, no numpy reduction
            if not any(t > hi + 1e-9 for t in X[:, 3].tolist()):
                return X
        elif not (X[:, 3] > hi + 1e-9).any():
            return X
        blocks = np.maximum(np.ceil(np.exp2(X[:, 3] - hi) * (1 - 1e-12)), 1.0)
        X = X.copy()
        X[:, :3] -= np.log(blocks)[:, None]
        X[:, 3] -= np.log2(blocks)
        return X

    def range_misses(self, X: np.ndarray) -> dict[str, RangeMiss]:
        """Block size -> its `RangeMiss` (tokens, d_model, width read back as sizes); the
        Level-1 times are not ranges (as in `out_of_range`)."""
        out: dict[str, RangeMiss] = {}
        sizes = block_sizes(X, self.block)
        for j, name in enumerate(RANGE_FEATURES):
            lo, hi = self.range_[name]
            x = sizes[:, j]
            if within(x, lo - 1e-9, hi + 1e-9):
                continue
            miss = range_miss(np.exp2(x), 2.0**lo, 2.0**hi)
            if any_true(miss.outside):
                out[name.removeprefix("log2_")] = miss
        return out

    def out_of_range(self, X: np.ndarray) -> np.ndarray:
        # The Level-1 times may go beyond what the blocks measured; the sizes may not.
        sizes = block_sizes(X, self.block)
        out = np.zeros(X.shape[0], dtype=bool)
        for j, name in enumerate(RANGE_FEATURES):
            lo, hi = self.range_[name]
            out |= (sizes[:, j] < lo - 1e-9) | (sizes[:, j] > hi + 1e-9)
        return out

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        return {"log_factor": self.log_factor(np.asarray(arrays["X"], dtype=float))}

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            **self.mlp_.to_state("mlp/"),
            "block": np.array(self.block),
            "features": np.array(LEVEL2_FEATURES),
            "gemm_features": np.array(self.gemm_features()),
            "range": np.array(list(self.range_.values()), dtype=float),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        gemm = tuple(str(f) for f in state.get("gemm_features", ()))
        steps = gemm == GEMM_FEATURES + STEP_FEATURES
        if tuple(str(f) for f in state["features"]) != LEVEL2_FEATURES or not (
            steps or gemm == GEMM_FEATURES
        ):
            raise ArtifactError("level-2 block model has other features; re-fit with `dse fit`")
        self = cls(block=str(state["block"]), wave_steps=steps)
        self.mlp_ = MLP.from_state(dict(state), "mlp/")
        self.range_ = {
            k: (float(lo), float(hi))
            for k, (lo, hi) in zip(RANGE_FEATURES, state["range"], strict=True)
        }
        return self
