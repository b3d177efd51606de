"""Level-1 models of the linear-attention layer kernels (Gated DeltaNet, Mamba-2), per GPU, engine
and phase, fitted on aiconfigurator's `linear_layer` rows (`dse.data._linear_layers`).

A layer's mixer is two kernels, each modelled as `dse.models._hybrid`'s fitted roofline base
times a residual MLP factor, and the layer's time is their sum (in_proj / out_proj are GEMMs,
priced by the GEMM models):
  conv:  the causal depthwise conv over C channels (q|k|v packed for GDN, x|B|C for Mamba-2);
         prefill FLOPs = 2 w C T, bytes = 4 C T (read x, write y) + 4 b C (w - 1) (conv state);
         decode (one token per sequence) FLOPs = 2 w C b, bytes = 4 C b + 4 b C (w - 1);
         work items: ceil(C / 64) channel blocks per sequence (a cost per sequence and
         channel that does not grow with the length up to ~512 tokens).
  scan:  Gated DeltaNet's chunked delta rule in prefill: per token and value head 6 dk dv
         (state update and read-out) + 2 x 64 (dk + dv) (the chunk's intra-chunk attention)
         FLOPs; bytes = 2 T (2 nk dk + 2 nv dv) (q, k, v in, o out) + 8 T nv (gate, beta, fp32)
         + 8 b nv dk dv (the fp32 state written); items: chunks x value heads.
         In decode the recurrent step: 6 b nv dk dv FLOPs, bytes = 8 b nv dk dv (state read and
         written, fp32) + 2 b (2 nk dk + 2 nv dv); items: sequences x value heads.
T = b s tokens, C channels, w conv width, nv / dv value heads / width, nk / dk key heads / width
(`n_heads`, `head_dim`, `n_groups`, `state_dim`). The efficiencies the base fits absorb a state
kept in bf16 (vLLM) rather than fp32 (SGLang). The share's Mamba-2 table holds the conv kernels
only, so a Mamba-2 model covers the conv (`kernels_` == ("conv",)).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ArtifactError, ConfigError, DataError
from dse.models import base as _base
from dse.models._hybrid import Roofline, apply_residual, fit_hybrid_heads, fit_roofline
from dse.models._nn import mlp_from_state
from dse.models.threads import threaded_fit
from dse.spec.hardware import get_gpu

if TYPE_CHECKING:
    import pandas as pd

LAYERS = ("gdn", "mamba2")
PHASES = ("context", "generation")
KERNELS = ("conv", "scan")
GDN_CHUNK = 64  # FLA's chunk of the chunked delta rule (tokens)
CONV_BLOCK = 64  # channels (and tokens) per thread block of the causal conv kernels
# Residual MLP per kernel: 32 x 32, 300 epochs, <= 20000 rows; one seed.
HIDDEN = (32, 32)
MAX_ITER = 300
MAX_ROWS = 20000
INPUTS = ("batch_size", "seq_len", "n_heads", "head_dim", "n_groups", "state_dim", "conv_width")
MIN_ROWS = 20  # the fewest rows of one kernel a model fits (a decode table has ~11 per layout)


def model_name(layer: str, phase: str, engine: str) -> str:
    """The artifact's name of the model of one table (`dse fit`'s linear_layer family)."""
    return f"linear_layer.{layer}.{phase}.{engine}"


def conv_channels(layer: str, engine: str, v: Mapping[str, np.ndarray]) -> np.ndarray:
    """Channels of the conv kernel (`dse.data._linear_layers.conv_channels`): q|k|v or x|B|C;
    TensorRT-LLM's GDN collector ran the key channels alone."""
    qk = v["n_groups"] * v["state_dim"]
    if layer == "gdn" and engine == "trtllm":
        return qk
    return 2.0 * qk + v["n_heads"] * v["head_dim"]


def kernel_work(
    layer: str, phase: str, kernel: str, engine: str, v: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FLOPs, bytes, work items) of one call of one kernel (see module doc)."""
    b, s = v["batch_size"], v["seq_len"] if phase == "context" else np.ones_like(v["batch_size"])
    t = b * s
    nv, dv, nk, dk, w = v["n_heads"], v["head_dim"], v["n_groups"], v["state_dim"], v["conv_width"]
    if kernel == "conv":
        c = conv_channels(layer, engine, v)
        flops = 2.0 * w * c * t
        bytes_ = 4.0 * c * t + 4.0 * b * c * (w - 1.0)
        # a fixed cost per (sequence, channel block), whatever the length: TensorRT-LLM's
        # Mamba-2 conv costs the same 1.1 ns per sequence-channel at 1 to 512 tokens (H100)
        items = b * np.ceil(c / CONV_BLOCK)
        return flops, bytes_, items
    state = nv * dk * dv
    io = 2.0 * (2.0 * nk * dk + 2.0 * nv * dv)
    if phase == "context":
        flops = t * (6.0 * state + 2.0 * GDN_CHUNK * nv * (dk + dv))
        bytes_ = t * io + 8.0 * t * nv + 8.0 * b * state
        items = b * nv * np.ceil(s / GDN_CHUNK)
        return flops, bytes_, items
    return 6.0 * b * state, 8.0 * b * state + b * io, b * nv


def _features(
    kernel: str,
    channels: np.ndarray,
    v: Mapping[str, np.ndarray],
    flops,
    bytes_,
    items,
    log_t0,
    n_sms: float,
) -> np.ndarray:
    """Residual-MLP inputs: log sizes, log work, log base time, and the waves of work items
    over the SMs (a grid of 1.1 waves costs nearly 2). The conv is depthwise: its channels are
    all of the layout it sees (heads and widths only through them), so its MLP reads log
    channels and no head sizes, and a held-out layout is a new channel count between measured
    ones rather than a new corner of five head inputs."""
    b, s = v["batch_size"], v["seq_len"]
    waves = np.ceil(items / n_sms)
    if kernel == "conv":
        layout = [np.log(channels)]
    else:
        layout = [
            np.log(v["n_heads"]),
            np.log(v["n_groups"]),
            np.log(v["n_heads"] / v["n_groups"]),
            np.log(v["head_dim"]),
            np.log(v["state_dim"]),
        ]
    return np.stack(
        [
            np.log(b),
            np.log(s),
            np.log(b * s),
            *layout,
            np.log(flops),
            np.log(bytes_),
            log_t0,
            np.log(items / n_sms),
            items / (waves * n_sms),
        ]
    ).T


class LinearLayerModel(_base.Model):
    """The mixer kernels of one linear-attention layer (conv, and the scan where measured) for
    one engine and phase on one GPU; see module doc.

    predict(batch_size, seq_len, n_heads, head_dim, n_groups, state_dim, conv_width=4) ->
    latency_s (the kernels' sum), per kernel `<kernel>_s` and `<kernel>_base_s`, base_s,
    flops, bytes, and `floor_s` (the plain roofline of the work at the GPU's peak and HBM
    bandwidth, no launch: no prediction is below it). Decode ignores seq_len (one token).
    """

    kind: ClassVar[str] = "linear_layer"
    gpu_fields: ClassVar[tuple[str, ...]] = ("n_sms", "peak_bf16_flops_per_s", "hbm_bw_bytes_per_s")
    _parameter_constraints: ClassVar[dict[str, Any]] = {"layer": LAYERS, "phase": PHASES}

    def __init__(
        self,
        layer: str = "gdn",
        phase: str = "context",
        gpu: str = "h100_sxm",
        engine: str = "vllm",
        seed: int = 0,
        max_rows: int = MAX_ROWS,
        max_iter: int = MAX_ITER,
    ) -> None:
        self.layer = layer
        self.phase = phase
        self.gpu = gpu
        self.engine = engine
        self.seed = seed
        self.max_rows = max_rows
        self.max_iter = max_iter

    def _inputs(self, arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
        n = _base.batch_size_of(arrays)
        need = [
            k
            for k in INPUTS[:6]
            if k not in arrays and not (k == "seq_len" and self.phase == "generation")
        ]
        if need:
            raise DataError(f"{self.layer} {self.phase} linear layer needs inputs {need}")
        v = {k: _base.as_float(k, arrays[k], n) for k in INPUTS[:6] if k in arrays}
        if self.phase == "generation":
            v["seq_len"] = np.ones(n)
        v["conv_width"] = _base.as_float("conv_width", arrays.get("conv_width", 4.0), n)
        return v

    # ---- fitting --------------------------------------------------------------------------
    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        """Fit on the rows of `df` for this GPU, engine, layer and phase (kind linear_layer);
        each kernel the rows hold gets its base and residual."""
        self._validate_params()
        d = df[
            (df["gpu"] == self.gpu)
            & (df["engine"] == self.engine)
            & (df["layer"] == self.layer)
            & (df["phase"] == self.phase)
        ]
        kernels = tuple(k for k in KERNELS if (d["kernel"] == k).sum() >= MIN_ROWS)
        if not kernels:
            raise DataError(
                f"{self.layer} {self.phase} linear layer for {self.gpu}/{self.engine}: "
                f"no kernel with >= {MIN_ROWS} rows"
            )
        g = get_gpu(self.gpu)
        self.gpu_spec_ = _base.gpu_constants(g, self.gpu_fields)
        self.kernels_ = kernels
        self.roofs_: dict[str, Roofline] = {}
        self.mlps_: dict[str, Any] = {}
        rng: dict[str, list[np.ndarray]] = {}
        for k in kernels:
            part = d[d["kernel"] == k]
            v = self._inputs({c: part[c].to_numpy() for c in INPUTS})
            y = part["latency_s"].to_numpy(np.float64)
            flops, bytes_, items = kernel_work(self.layer, self.phase, k, self.engine, v)
            self.roofs_[k] = fit_roofline(
                flops,
                bytes_,
                y,
                self.gpu_spec_["peak_bf16_flops_per_s"],
                self.gpu_spec_["hbm_bw_bytes_per_s"],
                items,
            )
            base = self.roofs_[k].parts(flops, bytes_, items)["base_s"]
            ch = conv_channels(self.layer, self.engine, v)
            X = _features(k, ch, v, flops, bytes_, items, np.log(base), self.gpu_spec_["n_sms"])
            self.mlps_[k], _ = fit_hybrid_heads(
                X,
                y,
                base,
                np.full(len(y), np.nan),
                members=1,
                hidden=HIDDEN,
                max_iter=self.max_iter,
                max_rows=self.max_rows,
                seed=self.seed,
            )
            for key in INPUTS:
                rng.setdefault(key, []).append(v[key])
        self.range_ = _base.fitted_range({k: np.concatenate(a) for k, a in rng.items()})
        if self.phase == "generation":
            self.range_.pop("seq_len", None)
        return self

    # ---- prediction -----------------------------------------------------------------------
    def predict(self, **arrays: Any) -> dict[str, np.ndarray]:
        self._check_fitted()
        v = self._inputs(arrays)
        peak, bw = self.gpu_spec_["peak_bf16_flops_per_s"], self.gpu_spec_["hbm_bw_bytes_per_s"]
        n = len(v["batch_size"])
        out: dict[str, np.ndarray] = {
            k: np.zeros(n) for k in ("latency_s", "base_s", "flops", "bytes", "floor_s")
        }
        for k in self.kernels_:
            flops, bytes_, items = kernel_work(self.layer, self.phase, k, self.engine, v)
            part = self.roofs_[k].parts(flops, bytes_, items)
            ch = conv_channels(self.layer, self.engine, v)
            X = _features(
                k, ch, v, flops, bytes_, items, np.log(part["base_s"]), self.gpu_spec_["n_sms"]
            )
            apply_residual(part, X, self.mlps_[k], None)
            # physics: never faster than the plain roofline of the kernel's work
            floor = np.maximum(flops / peak, bytes_ / bw)
            t = np.maximum(part["latency_s"], floor)
            out[f"{k}_s"] = t
            out[f"{k}_base_s"] = part["base_s"]
            out["latency_s"] = out["latency_s"] + t
            out["base_s"] = out["base_s"] + part["base_s"]
            out["flops"] = out["flops"] + flops
            out["bytes"] = out["bytes"] + bytes_
            out["floor_s"] = out["floor_s"] + floor
        return out

    # ---- state ----------------------------------------------------------------------------
    def to_state(self) -> dict[str, np.ndarray]:
        state: dict[str, np.ndarray] = {
            "layer": np.array(self.layer),
            "phase": np.array(self.phase),
            "gpu": np.array(self.gpu),
            "engine": np.array(self.engine),
            "kernels": np.array(",".join(self.kernels_)),
            **_base.gpu_constants_to_state(self.gpu_spec_),
            **_base.range_to_state(self.range_),
        }
        for k in self.kernels_:
            state.update(self.roofs_[k].to_state(f"{k}/"))
            state.update(self.mlps_[k].to_state(f"{k}/resid/"))
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        _base.need(state, ("layer", "phase", "gpu", "engine", "kernels"), "linear_layer")
        m = cls(str(state["layer"]), str(state["phase"]), str(state["gpu"]), str(state["engine"]))
        try:
            m._validate_params()
        except ConfigError as exc:
            raise ArtifactError(f"linear_layer model state: {exc}") from None
        m.kernels_ = tuple(str(state["kernels"]).split(","))
        if not m.kernels_ or any(k not in KERNELS for k in m.kernels_):
            raise ArtifactError(f"linear_layer model state: kernels {m.kernels_!r} unknown")
        m.gpu_spec_ = _base.gpu_constants_from_state(state, cls.gpu_fields, "linear_layer")
        m.range_ = _base.range_from_state(state)
        m.roofs_ = {k: Roofline.from_state(state, f"{k}/") for k in m.kernels_}
        m.mlps_ = {k: mlp_from_state(dict(state), f"{k}/resid/") for k in m.kernels_}
        return m


def linear_inputs(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """predict() keyword arrays of a linear_layer table."""
    return {c: df[c].to_numpy() for c in INPUTS if c in df.columns}
