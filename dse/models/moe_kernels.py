"""SGLang's MoE kernel as a function of the configuration, and the fused-MoE model that prices
each kernel by its own model (kind "moe_kernels"; issue 35).

SGLang 0.5.14 runs one of several MoE kernels for a layer, picked by its MoE runner backend for
the model on the GPU, and aiconfigurator's SGLang tables name the one that ran in
`kernel_source`. In each table every row of one layout (hidden, inter, topk, experts) ran one
kernel, whatever the token count or the TP / EP split. Read off the bf16 tables:

- B200: FlashInfer's TRT-LLM MoE on 8 of 13 layouts (every top-k >= 8 layout but one), Triton's
  fused MoE on the other 5 (top-k 1, 2, 2, 4 and (4096, 2048, 8, 256)). The rule "top-k >= 8:
  TRT-LLM, else Triton" names the kernel of 12 of 13 layouts (33,939 of 37,098 rows); fp8_block
  12 of 14 (the exceptions (4096, 2048, 8, 256): Triton, (5120, 8192, 1, 16): TRT-LLM).
- H100: FlashInfer's CUTLASS MoE on the 2 non-gated (ReLU^2) Nemotron-3 layouts, both top-k 22,
  Triton's fused MoE on the other 11 (top-k 1-10): the rule "top-k >= 16: CUTLASS, else Triton"
  names all 13. Top-k, not the gating, because the predictor passes the MoE models no gated
  flag (`dse.predict.adapters._price_moe`).

aiconfigurator's collector takes the backend per model (its case files' `sglang_moe_backends`,
SGLang's serving default for that model), so the kernel follows the model, not a shape limit of
the kernels: the rule is the simplest cut of the measured layouts, not SGLang's own code.

The model (`KernelMoEModel`) fits one `dse.models.moe.MoEModel` per kernel on the rows that ran
it (their `kernel_source`), and prices a configuration by the model of the kernel the rule names
for it (output "kernel"). Held out by layout (`dse fit`'s CV) B200 / H100 bf16 read 19.52 /
13.92% (B200 pooled, below: 17.84%), 47.07 / 16.97% with one model over both kernels, B200
fp8_block 16.37% (26.19% as one model; docs/accuracy.md "B200 SXM and SGLang", docs/b200.md).

Pooled with another engine (`pool`): a kernel's model is fitted on its rows and the rows of
`pool` (vLLM's table of the GPU and dtype) that ran the same kernel (`SOURCE_KERNEL`), of the
layouts its own rows hold (a layout held out of the fit is held out of the pool too), with a
0/1 "row is this engine's" residual input (`PooledMoEModel`); a configuration is priced as this
engine's. Shipped for B200 bf16 (`dse.fitting.moe.POOLED_TABLES`): FlashInfer's TRT-LLM MoE
with vLLM's TRT-LLM rows, 19.52 -> 17.84% held out by layout (docs/dev/accuracy-journal.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

import numpy as np
import pandas as pd

from dse.errors import ArtifactError, DataError
from dse.models import base as _base
from dse.models.moe import MAX_ITER, MAX_ROWS, MoEModel, moe_inputs
from dse.models.threads import threaded_fit

TRITON = "triton"  # SGLang's fused Triton MoE ("sglang_fused_moe_triton")
TRTLLM = "flashinfer_trtllm"  # FlashInfer's TRT-LLM-gen MoE ("sglang_flashinfer_trtllm_moe")
CUTLASS = "flashinfer_cutlass"  # FlashInfer's CUTLASS MoE ("sglang_flashinfer_cutlass_moe")
# B200: the smallest top-k SGLang runs on FlashInfer's TRT-LLM MoE (rule above)
B200_TRTLLM_MIN_TOPK = 8
# H100: the smallest top-k SGLang runs on FlashInfer's CUTLASS MoE (the tables: 22, else <= 10)
H100_CUTLASS_MIN_TOPK = 16
# The rule's kernel of a table's `kernel_source`: the model is fitted on the kernel each row ran
SOURCE_KERNEL = {
    "sglang_fused_moe_triton": TRITON,
    "sglang_flashinfer_trtllm_moe": TRTLLM,
    "sglang_flashinfer_cutlass_moe": CUTLASS,
    # vLLM 0.24.0's unquantized MoE backends (its bf16 tables), the rows a pooled fit adds
    "vllm_unquantizedfusedmoe_triton_tritonexperts": TRITON,
    "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts": TRTLLM,
    "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts": CUTLASS,
}
LAYOUT = ("hidden_size", "inter_size", "topk", "num_experts")
# A kernel with fewer training rows than this gets no model of its own: its configurations are
# priced by the kernel model fitted on the most rows (one layout of the tables is 1,944-3,159).
MIN_KERNEL_ROWS = 300


def sglang_moe_kernel(gpu: str, topk: Any, n: int) -> np.ndarray:
    """The MoE kernel SGLang runs for each of `n` configurations of top-k `topk` on `gpu`
    (module doc); Triton's fused MoE on a GPU the rule has no tables of."""
    k = np.broadcast_to(np.asarray(topk, dtype=np.float64), (n,))
    if gpu.startswith("b200"):
        return np.where(k >= B200_TRTLLM_MIN_TOPK, TRTLLM, TRITON)
    if gpu.startswith("h100"):
        return np.where(k >= H100_CUTLASS_MIN_TOPK, CUTLASS, TRITON)
    return np.full(n, TRITON)


class PooledMoEModel(MoEModel):
    """`MoEModel` fitted on the rows of its engine and of another that ran the same kernel, the
    residual's features plus a 0/1 "row is `engine`'s"; predict prices `engine`'s rows. fit
    takes the rows as given (the caller picks GPU, dtype and kernel)."""

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        return self._fit_rows(df)

    def _residual_inputs(self, X: np.ndarray, d: pd.DataFrame | None) -> np.ndarray:
        """`MoEModel`'s features and "row is `engine`'s" (1 when predicting)."""
        own = np.ones(len(X)) if d is None else (d["engine"] == self.engine).to_numpy(np.float64)
        return np.column_stack([X, own])


class KernelMoEModel(_base.Model):
    """Fused-MoE latency of one engine and MoE dtype on one GPU, one `MoEModel` per SGLang MoE
    kernel (`sglang_moe_kernel`). predict takes MoEModel's inputs and adds "kernel"."""

    kind: ClassVar[str] = "moe_kernels"  # the manifest's kind; dse.models.MODEL_CLASSES

    def __init__(
        self,
        gpu: str = "b200_sxm",
        engine: str = "sglang",
        moe_dtype: str = "bfloat16",
        seed: int = 0,
        max_rows: int = MAX_ROWS,
        max_iter: int = MAX_ITER,
        pool: pd.DataFrame | None = None,
    ) -> None:
        self.gpu = gpu
        self.engine = engine
        self.moe_dtype = moe_dtype
        self.seed = seed
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.pool = pool  # another engine's rows of the GPU and dtype (module doc), or None

    def _sub_args(self) -> tuple[str, str, str, int, int, int]:
        return (self.gpu, self.engine, self.moe_dtype, self.seed, self.max_rows, self.max_iter)

    def _sub(self) -> MoEModel:
        return MoEModel(*self._sub_args())

    def _pool_rows(self, d: pd.DataFrame) -> pd.DataFrame:
        """The rows of `pool` a fit on this engine's rows `d` may add (column "_kernel"): the
        GPU's and dtype's, of a kernel `SOURCE_KERNEL` names, of the layouts `d` holds (so no
        timing of a layout held out of `d` reaches the fit)."""
        if self.pool is None or not len(self.pool):
            return pd.DataFrame({"_kernel": pd.Series([], dtype=object)})
        p = self.pool[(self.pool["gpu"] == self.gpu) & (self.pool["engine"] != self.engine)]
        p = p[p["dtype"].astype(str) == self.moe_dtype]
        mine = pd.MultiIndex.from_frame(d[list(LAYOUT)].astype(np.int64))
        p = p[pd.MultiIndex.from_frame(p[list(LAYOUT)].astype(np.int64)).isin(mine)]
        return p.assign(_kernel=p["kernel_source"].astype(str).map(SOURCE_KERNEL)).dropna(
            subset=["_kernel"]
        )

    def kernels(self, **arrays: Any) -> np.ndarray:
        """The kernel of each configuration (`sglang_moe_kernel`)."""
        n = _base.batch_size_of(arrays)
        return sglang_moe_kernel(self.gpu, arrays["topk"], n)

    def ran(self, d: pd.DataFrame) -> np.ndarray:
        """The kernel each table row ran: its `kernel_source` (`SOURCE_KERNEL`), the rule's
        where the table does not name one the rule knows."""
        kern = self.kernels(**self._table_inputs(d))
        if "kernel_source" not in d:
            return kern
        src = d["kernel_source"].astype(str).map(SOURCE_KERNEL).to_numpy(dtype=object)
        return np.where(pd.isna(src), kern, src).astype(str)

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on the moe rows of `df` for this GPU, engine and MoE dtype: one MoEModel per
        kernel, each on the rows that ran it (`ran`; B200 bf16: the rule would give 3,159
        Triton rows to TRT-LLM's model: held out by layout 32.00%, against 19.52% fitted so;
        docs/dev/accuracy-journal.md)."""
        d = df[(df["gpu"] == self.gpu) & (df["engine"] == self.engine)]
        d = d[d["dtype"].astype(str) == self.moe_dtype]
        if len(d) < 50:
            raise DataError(
                f"moe {self.gpu}/{self.engine}/{self.moe_dtype}: {len(d)} rows, need >= 50"
            )
        ins = self._table_inputs(d)
        kern = self.ran(d)
        names, counts = np.unique(kern, return_counts=True)
        pool = self._pool_rows(d)
        self.models_ = {}
        self.pooled_ = {}  # kernel -> pooled rows of the other engine
        for k, c in zip(names, counts, strict=True):
            if c < MIN_KERNEL_ROWS:
                continue
            other = pool[pool["_kernel"] == k]
            if len(other):
                self.pooled_[str(k)] = len(other)
                sub = PooledMoEModel(*self._sub_args())
                mine = d[kern == k].assign(_kernel=str(k))
                self.models_[str(k)] = sub.fit(pd.concat([mine, other], ignore_index=True))
            else:
                self.models_[str(k)] = self._sub().fit(d[kern == k])
        if not self.models_:  # every kernel small: one model over all
            self.models_ = {str(names[np.argmax(counts)]): self._sub().fit(d)}
        self.fallback_ = str(max(self.models_, key=lambda k: int(counts[names == k].sum())))
        sub = self.models_[self.fallback_]
        self.range_ = _base.fitted_range(sub._range_inputs(sub._inputs(ins)))
        return self

    @property
    def power_mlp_(self) -> Any:
        """The power head of the fallback kernel's model (None where no power was measured)."""
        return self.models_[self.fallback_].power_mlp_

    def _table_inputs(self, d: pd.DataFrame) -> dict[str, np.ndarray]:
        """predict() keyword arrays of this model's table rows (the kernel is not one)."""
        return moe_inputs(d)

    def range_arrays(self, **arrays: Any) -> dict[str, np.ndarray]:
        return self._sub().range_arrays(**arrays)

    def range_misses(self, **inputs: Any) -> dict[str, _base.RangeMiss]:
        return _base.range_misses(self.fitted_range(), {**inputs, **self.range_arrays(**inputs)})

    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        self._check_fitted()
        n = _base.batch_size_of(arrays)
        kern = self.kernels(**arrays)
        use = np.where(np.isin(kern, list(self.models_)), kern, self.fallback_)
        out: dict[str, np.ndarray] = {}
        for k in np.unique(use):
            sel = use == k
            sub = {
                name: (np.broadcast_to(np.asarray(a), (n,))[sel] if np.ndim(a) else a)
                for name, a in arrays.items()
            }
            for key, val in self.models_[str(k)].predict(**sub).items():
                val = np.asarray(val)
                if key not in out:
                    out[key] = np.empty(n, dtype=val.dtype if val.dtype.kind != "U" else object)
                out[key][sel] = val
        out["kernel"] = kern.astype(object)
        return out

    def to_state(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "moe_dtype": np.array(self.moe_dtype),
            "kernels": np.array(sorted(self.models_)),
            "fallback": np.array(self.fallback_),
            **_base.range_to_state(self.range_),
            **({"pooled": np.array(sorted(self.pooled_))} if self.pooled_ else {}),
        }
        for k, m in self.models_.items():
            state.update({f"kernel/{k}/{key}": v for key, v in m.to_state().items()})
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(state, ("gpu", "engine", "moe_dtype", "kernels", "fallback"), "moe_kernels")
        m = cls(str(state["gpu"]), str(state["engine"]), str(state["moe_dtype"]))
        m.models_ = {}
        pooled = set(map(str, np.atleast_1d(state["pooled"]))) if "pooled" in state else set()
        m.pooled_ = dict.fromkeys(pooled, 0)  # the rows are not kept, the kernels are
        for k in map(str, np.atleast_1d(state["kernels"])):
            pre = f"kernel/{k}/"
            sub = {key[len(pre) :]: v for key, v in state.items() if key.startswith(pre)}
            if not sub:
                raise ArtifactError(f"moe_kernels state: kernel {k!r} has no model; re-fit")
            m.models_[k] = (PooledMoEModel if k in pooled else MoEModel).from_state(sub)
        m.fallback_ = str(state["fallback"])
        m.range_ = _base.range_from_state(state)
        return m
