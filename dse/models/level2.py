"""Level 2 of HYMELL: residual MLPs that correct the Level-1 sum of a whole block (attention
projections, dense FFN) that vidur measured, on the block's shape features (`Level2Block`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError
from dse.models._base import Model, RangeMiss, range_miss
from dse.models._nn import MLP

if TYPE_CHECKING:
    from dse.predict.ops import Op

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
LEVEL2_FEATURES: tuple[str, ...] = ("log_l1_s", "log2_tokens", "log2_d_model", "log2_width")


def block_features(l1_call_s: np.ndarray, ops: Mapping[str, Op], block: str) -> np.ndarray:
    """(n, 4) inputs of a block residual: log Level-1 time of one call of the block, log2 of
    tokens, d_model and the block's per-GPU width (QKV width or d_ff / tp)."""
    if block == "attention_proj":  # x[tokens, d_model] @ W_qkv[width, d_model]^T
        g = ops["attention/qkv"]
        tokens, d, width = g.dims["m"], g.dims["k"], g.dims["n"]
    else:  # down projection: x[tokens, d_ff / tp] @ W[d_model, d_ff / tp]^T
        g = ops["ffn/down"]
        tokens, d, width = g.dims["m"], g.dims["n"], g.dims["k"]
    cols = [np.log(np.maximum(l1_call_s, 1e-9)), np.log2(tokens), np.log2(d), np.log2(width)]
    n = np.shape(l1_call_s)[0]
    return np.stack([np.broadcast_to(np.asarray(c, dtype=float), (n,)) for c in cols], axis=1)


class Level2Block(Model):
    """Residual MLP ensemble of one block: log(measured block time / sum of Level-1 op times),
    clipped to +-L2_CLIP."""

    kind: ClassVar[str] = "level2_block"  # the manifest's kind; dse.models.MODEL_CLASSES
    _parameter_constraints: ClassVar[dict[str, Any]] = {"block": tuple(LEVEL2_BLOCKS)}

    def __init__(
        self,
        block: str = "ffn_dense",
        hidden: tuple[int, ...] = (8,),
        alpha: float = 1.0,
        n_ensemble: int = 3,
        seed: int = 0,
    ) -> None:
        self.block = block
        self.hidden = hidden
        self.alpha = alpha
        self.n_ensemble = n_ensemble
        self.seed = seed

    def fit(self, X: np.ndarray, log_ratio: np.ndarray) -> Self:
        """Fit the ensemble on block features `X` (`block_features`) and the measured log ratio
        of each block time to its Level-1 sum."""
        self._validate_params()
        from dse.models._nn import fit_mlp, merge_ensemble
        from dse.models.level3 import RESIDUAL_MLP

        mlps = [
            fit_mlp(
                X,
                log_ratio,
                hidden=self.hidden,
                alpha=self.alpha,
                seed=self.seed + k,
                **RESIDUAL_MLP,
            )
            for k in range(self.n_ensemble)
        ]
        self.mlp_ = merge_ensemble(tuple(mlps)) or mlps[0]
        self.range_ = {
            name: (float(X[:, i].min()), float(X[:, i].max()))
            for i, name in enumerate(LEVEL2_FEATURES)
        }
        return self

    def log_factor(self, X: np.ndarray) -> np.ndarray:
        return np.clip(self.mlp_.predict(X), -L2_CLIP, L2_CLIP)

    def in_token_blocks(self, X: np.ndarray) -> np.ndarray:
        """The features of a block call with more tokens than the block was fitted on, read as
        ceil(tokens / most fitted) equal row blocks inside the range: each with its share of
        the tokens and of the Level-1 time (the factor of one applies to all of them, as the
        Level-1 GEMM tables price a tall GEMM as row blocks)."""
        hi = self.range_["log2_tokens"][1]
        if not (X[:, 1] > hi + 1e-9).any():
            return X
        blocks = np.maximum(np.ceil(np.exp2(X[:, 1] - hi) * (1 - 1e-12)), 1.0)
        X = X.copy()
        X[:, 0] -= np.log(blocks)
        X[:, 1] -= np.log2(blocks)
        return X

    def range_misses(self, X: np.ndarray) -> dict[str, RangeMiss]:
        """Block size -> its `RangeMiss` (tokens, d_model, width: the log2 features read back
        as sizes); the Level-1 time itself is not a range (as in `out_of_range`)."""
        out: dict[str, RangeMiss] = {}
        for j, name in enumerate(LEVEL2_FEATURES[1:], start=1):
            lo, hi = self.range_[name]
            x = X[:, j]
            if x.min() >= lo - 1e-9 and x.max() <= hi + 1e-9:
                continue
            miss = range_miss(np.exp2(x), 2.0**lo, 2.0**hi)
            if miss.outside.any():
                out[name.removeprefix("log2_")] = miss
        return out

    def out_of_range(self, X: np.ndarray) -> np.ndarray:
        lo = np.array([v[0] for v in self.range_.values()])
        hi = np.array([v[1] for v in self.range_.values()])
        # The Level-1 time itself may go beyond what the blocks measured; the sizes may not.
        # Column by column: a (n, 3) comparison would run numpy's loop once per row.
        out = np.zeros(X.shape[0], dtype=bool)
        for j in range(1, X.shape[1]):
            out |= (X[:, j] < lo[j] - 1e-9) | (X[:, j] > hi[j] + 1e-9)
        return out

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        return {"log_factor": self.log_factor(np.asarray(arrays["X"], dtype=float))}

    def to_state(self) -> dict[str, np.ndarray]:
        return {
            **self.mlp_.to_state("mlp/"),
            "block": np.array(self.block),
            "features": np.array(LEVEL2_FEATURES),
            "range": np.array(list(self.range_.values()), dtype=float),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        if tuple(str(f) for f in state["features"]) != LEVEL2_FEATURES:
            raise ArtifactError("level-2 block model has other features; re-fit with `dse fit`")
        self = cls(block=str(state["block"]))
        self.mlp_ = MLP.from_state(dict(state), "mlp/")
        self.range_ = {
            k: (float(lo), float(hi))
            for k, (lo, hi) in zip(LEVEL2_FEATURES, state["range"], strict=True)
        }
        return self
