"""Board power of a kernel as a function of how hard it drives the compute units and HBM.

    P = P_idle + (P_board - P_idle) * f(compute_util, memory_util, duration of one call)

`compute_util` = achieved FLOP/s / dense peak of the dtype, `memory_util` = achieved bytes/s /
HBM bandwidth; both are dimensionless, so `f` fitted on one GPU transfers to any GPU of the
registry through that GPU's idle and board power (`dse.spec.hardware`). Energy of a call is then
power x time for every GPU.

Kernel duration enters because back-to-back microsecond kernels never reach steady-state power.
Only h200_sxm has measured power behind it: `f` is fitted on the H200 GEMM rows of
aiconfigurator (mean NVML board power while the kernel looped, idle included). On every other GPU
the same `f` is an assumption, and artifacts record `measured_power: false` for them.

    from dse.models.artifact import Artifact
    model = Artifact.load("h200_sxm").model("power")
    model.predict(0.7, 0.2, 1e-4, gpu=get_gpu("h100_sxm"))["power_w"]   # watts
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self

import numpy as np

from dse.errors import ConfigError
from dse.models._nn import MLP, fit_mlp
from dse.models.base import Model
from dse.models.threads import threaded_fit
from dse.spec.hardware import GPU

if TYPE_CHECKING:
    import pandas as pd

# Utilisations above 1 happen (spec sheets round; L2 hits beat HBM): clip the inputs here.
UTIL_CLIP = (0.0, 1.5)
# The fit's target f may exceed 1 slightly (transients above the power limit in NVML means);
# the prediction never leaves [0, 1]: a kernel's mean power lies between idle and the board
# limit (physics holds on every number, issue 33).
FRACTION_CLIP = (0.0, 1.05)
PREDICT_CLIP = (0.0, 1.0)
LATENCY_CLIP_S = (1e-6, 1.0)
MAX_FIT_ROWS = 8000
DEFAULT_LATENCY_S = 1e-3  # a long kernel: steady-state power


def _inputs(compute_util: Any, memory_util: Any, latency_s: Any) -> np.ndarray:
    if (
        type(compute_util) is np.ndarray
        and type(memory_util) is np.ndarray
        and type(latency_s) is np.ndarray
        and compute_util.dtype == memory_util.dtype == latency_s.dtype == np.float64
        and compute_util.shape == memory_util.shape == latency_s.shape
    ):
        return _inputs_same_shape(compute_util, memory_util, latency_s)
    uc = np.clip(np.asarray(compute_util, dtype=np.float64), *UTIL_CLIP)
    um = np.clip(np.asarray(memory_util, dtype=np.float64), *UTIL_CLIP)
    lat = np.clip(np.asarray(latency_s, dtype=np.float64), *LATENCY_CLIP_S)
    uc, um, lat = np.broadcast_arrays(uc, um, lat)
    # sqrt spreads the many low-utilisation kernels; log10 duration: back-to-back microsecond
    # kernels leave the SMs idle between launches and never reach steady-state clocks.
    cols = [uc, um, np.sqrt(uc), np.sqrt(um), np.log10(lat)]
    return np.column_stack([c.ravel() for c in cols])


def _inputs_same_shape(uc: np.ndarray, um: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """`_inputs` of three float64 arrays of one shape (what the pricer passes): the same
    values written straight into the (n, 5) matrix, without numpy's clip, broadcast and
    stack wrappers (~25 us of a one-configuration call's ~50 us power evaluation)."""
    X = np.empty((uc.size, 5))
    np.minimum(np.maximum(uc.ravel(), UTIL_CLIP[0]), UTIL_CLIP[1], out=X[:, 0])
    np.minimum(np.maximum(um.ravel(), UTIL_CLIP[0]), UTIL_CLIP[1], out=X[:, 1])
    np.sqrt(X[:, 0], out=X[:, 2])
    np.sqrt(X[:, 1], out=X[:, 3])
    np.log10(np.minimum(np.maximum(lat.ravel(), LATENCY_CLIP_S[0]), LATENCY_CLIP_S[1]), out=X[:, 4])
    return X


class PowerModel(Model):
    """f(compute_util, memory_util, latency_s) in [0, 1]: the fraction of the idle-to-board
    power span. fit(df) needs columns compute_util, memory_util, latency_s, power_w,
    idle_power_w, board_power_w.
    """

    kind: ClassVar[str] = "power"  # the manifest's kind; dse.models.MODEL_CLASSES
    inputs: ClassVar[tuple[str, ...]] = ("compute_util", "memory_util", "latency_s")

    def __init__(self, hidden: tuple[int, ...] = (8, 8), seed: int = 0) -> None:
        self.hidden = hidden
        self.seed = seed

    @threaded_fit
    def fit(self, df: pd.DataFrame) -> Self:
        if len(df) > MAX_FIT_ROWS:  # a smooth 3-input function: a seeded sample is plenty
            df = df.sample(MAX_FIT_ROWS, random_state=self.seed)
        span = df["board_power_w"].to_numpy(float) - df["idle_power_w"].to_numpy(float)
        frac = (df["power_w"].to_numpy(float) - df["idle_power_w"].to_numpy(float)) / span
        X = _inputs(df["compute_util"], df["memory_util"], df["latency_s"])
        self.mlp_ = fit_mlp(
            X,
            np.clip(frac, *FRACTION_CLIP),
            hidden=self.hidden,
            activation="tanh",
            solver="lbfgs",
            alpha=1e-3,
            max_iter=200,
            seed=self.seed,
        )
        self.range_ = {name: (float(df[name].min()), float(df[name].max())) for name in self.inputs}
        return self

    def fraction(
        self, compute_util: Any, memory_util: Any, latency_s: Any = DEFAULT_LATENCY_S
    ) -> np.ndarray:
        """f in [0, 1], shaped like the broadcast inputs: power between idle and board."""
        X = _inputs(compute_util, memory_util, latency_s)
        if type(compute_util) is np.ndarray and len(X) == compute_util.size:
            shape = compute_util.shape  # the common case: inputs of one shape
        else:
            shape = np.broadcast_shapes(
                np.shape(compute_util), np.shape(memory_util), np.shape(latency_s)
            )
        f = self.mlp_.predict(X)
        return np.minimum(np.maximum(f, PREDICT_CLIP[0]), PREDICT_CLIP[1]).reshape(shape)

    def predict(
        self,
        compute_util: Any,
        memory_util: Any,
        latency_s: Any = DEFAULT_LATENCY_S,
        idle_power_w: Any = None,
        board_power_w: Any = None,
        gpu: GPU | None = None,
    ) -> dict[str, np.ndarray]:
        """Board power in watts of a kernel of this duration (s) back to back; idle/board power
        default to those of `gpu`, the spec of the GPU predicted (the caller resolves its name:
        `dse.spec.hardware.get_gpu`; this model never looks one up)."""
        if (idle_power_w is None or board_power_w is None) and not isinstance(gpu, GPU):
            raise ConfigError(
                "PowerModel.predict: give idle_power_w and board_power_w, or gpu= a GPU spec "
                f"(dse.spec.hardware.get_gpu(name)), got gpu={gpu!r}"
            )
        idle = gpu.idle_power_w if idle_power_w is None else np.asarray(idle_power_w, float)
        board = gpu.board_power_w if board_power_w is None else np.asarray(board_power_w, float)
        f = self.fraction(compute_util, memory_util, latency_s)
        return {"power_w": idle + (board - idle) * f, "power_fraction": f}

    def to_state(self) -> dict[str, np.ndarray]:
        state = self.mlp_.to_state("f/")
        state["range"] = np.array([self.range_[k] for k in self.inputs], dtype=np.float64)
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, np.ndarray]) -> Self:
        obj = cls()
        obj.mlp_ = MLP.from_state(dict(state), "f/")
        rng = np.asarray(state["range"], dtype=np.float64)
        obj.range_ = {
            k: (float(lo), float(hi)) for k, (lo, hi) in zip(cls.inputs, rng, strict=True)
        }
        return obj
