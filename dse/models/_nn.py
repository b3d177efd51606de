"""A small multi-layer perceptron: fitted with scikit-learn, predicted with numpy alone.

The frozen artifact stores only plain arrays (weights, biases, input/output scalers), so loading
and predicting never import scikit-learn and do not depend on the version that fitted it.

    mlp = fit_mlp(X, y, hidden=(32, 32), seed=0)   # sklearn is imported here only
    state = mlp.to_state("gemm/")                  # dict[str, np.ndarray] for the artifact
    MLP.from_state(state, "gemm/").predict(X)      # numpy forward pass, same numbers

`MeanMLP` averages several such MLPs (fitted from other seeds); `mlp_from_state` reads either.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from dse.errors import ArtifactError
from dse.models.base import as_shape

ACTIVATIONS = ("relu", "tanh")
# Rows per block of the forward pass: a 4096 x 64 float32 activation block (1 MiB) stays in the
# L2 cache (2x faster than 16384-row blocks on a 64 x 64 MLP).
FORWARD_ROWS = 4096
# OpenBLAS picks other kernels, with another summation order, for GEMMs of fewer rows: a block
# is padded to a multiple of this many (at least this many) rows, so that a row's result does
# not depend on the batch it came in, and biases are added 16 rows at a time (one flat add of
# 16 x width values per 16 rows, not one short numpy loop per row).
MIN_GEMM_ROWS = 16


# `MeanMLP.predict_member`: rows whose member changes fewer times than this are predicted as
# row slices, more often by gathering each member's rows.
RUNS_AS_SLICES = 16


def _column_major(X: np.ndarray) -> bool:
    """Whether X's columns are contiguous (a column-major array, or a row slice of one) and its
    rows are not: the forward pass then standardises X.T block by block."""
    return X.ndim == 2 and X.shape[1] > 1 and X.strides[0] == X.itemsize


@dataclass(frozen=True)
class _Forward32:
    """Float32 weights of the forward pass: hidden layers for BLAS, the output column apart."""

    # (W (n_in, n_out), b tiled MIN_GEMM_ROWS times (MIN_GEMM_ROWS * n_out,)), float32
    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]
    w_out: np.ndarray  # (n_in,) float32: the first (only) output column
    b_out: float
    relu: bool
    # x_mean and 1 / x_scale repeated for FORWARD_ROWS rows: a block of X is standardised as
    # one flat array (broadcasting a few features per row runs numpy's loop once per row).
    mean_rows: np.ndarray
    inv_scale_rows: np.ndarray


@dataclass(frozen=True)
class MLP:
    """Weights of a fitted regressor. `predict` standardises X, runs the layers, un-scales y."""

    coefs: tuple[np.ndarray, ...]  # layer i: (n_in_i, n_out_i)
    intercepts: tuple[np.ndarray, ...]  # layer i: (n_out_i,)
    x_mean: np.ndarray  # (n_features,)
    x_scale: np.ndarray  # (n_features,), never 0
    y_mean: float
    y_scale: float
    activation: str = "relu"

    @property
    def n_features(self) -> int:
        return int(self.coefs[0].shape[0])

    @cached_property
    def _f32(self) -> _Forward32:
        hidden = tuple(
            (
                np.ascontiguousarray(w, dtype=np.float32),
                np.tile(np.asarray(b, dtype=np.float32), MIN_GEMM_ROWS),
            )
            for w, b in zip(self.coefs[:-1], self.intercepts[:-1], strict=True)
        )
        w_out = np.ascontiguousarray(self.coefs[-1][:, 0], dtype=np.float32)
        b_out = float(self.intercepts[-1][0])
        mean_rows = np.tile(np.asarray(self.x_mean, dtype=np.float64), FORWARD_ROWS)
        inv_rows = np.tile(1.0 / np.asarray(self.x_scale, dtype=np.float64), FORWARD_ROWS)
        return _Forward32(hidden, w_out, b_out, self.activation == "relu", mean_rows, inv_rows)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Forward pass for a batch X of shape (n, n_features); returns shape (n,).

        X is standardised in float64, the layers run in float32 (the MLPs were fitted in
        float64; the output moves by ~1e-7 relative, 2-4x faster than float64 GEMMs and 4x
        faster tanh), the output is un-scaled in float64. A row's result does not depend on the
        batch it comes in beyond float32 round-off: blocks padded to multiples of MIN_GEMM_ROWS
        rows for the hidden GEMMs, and the single output column as an einsum (a GEMV sums rows
        in an order that depends on their position). Bit identity across batch layouts holds
        on some CPUs only: which kernel OpenBLAS picks for a block depends on the CPU."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 1:
            X = X[None, :]
        f = self._f32
        n, k = X.shape
        # Column-major X (features as rows of X.T, how the models build them): standardised a
        # block at a time and transposed in the cache, not copied to row-major whole first
        # (that strided copy cost ~20% of a decode-attention prediction). Same arithmetic.
        by_col = _column_major(X)
        if by_col:
            XT = X.T
            mean_col = np.asarray(self.x_mean, dtype=np.float64)[:, None]
            inv_col = 1.0 / np.asarray(self.x_scale, dtype=np.float64)[:, None]
        else:
            flat = np.ascontiguousarray(X).reshape(-1)
        y = np.empty(n, dtype=np.float32)
        for s in range(0, n, FORWARD_ROWS):
            e = min(s + FORWARD_ROWS, n)
            m = -(-(e - s) // MIN_GEMM_ROWS) * MIN_GEMM_ROWS if f.hidden else e - s
            z = np.zeros((m, k), dtype=np.float32)
            if by_col:
                zc = XT[:, s:e] - mean_col
                zc *= inv_col
                z[: e - s] = zc.T
            else:
                size = (e - s) * k
                zs = flat[s * k : e * k] - f.mean_rows[:size]
                zs *= f.inv_scale_rows[:size]
                z.reshape(-1)[:size] = zs
            h = z
            for w, b in f.hidden:
                h = h @ w
                h.reshape(-1, b.size)[...] += b
                if f.relu:
                    np.maximum(h, np.float32(0.0), out=h)
                else:
                    np.tanh(h, out=h)
            y[s:e] = np.einsum("ij,j->i", h[: e - s], f.w_out)
        out = y.astype(np.float64)
        out += f.b_out
        out *= self.y_scale
        out += self.y_mean
        return out

    def to_state(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Plain arrays, keys prefixed (e.g. "resid/"), for `Artifact` storage."""
        state: dict[str, np.ndarray] = {
            f"{prefix}n_layers": np.array(len(self.coefs), dtype=np.int64),
            f"{prefix}x_mean": np.asarray(self.x_mean, dtype=np.float64),
            f"{prefix}x_scale": np.asarray(self.x_scale, dtype=np.float64),
            f"{prefix}y_scaler": np.array([self.y_mean, self.y_scale], dtype=np.float64),
            f"{prefix}activation": np.array(self.activation),
        }
        for i, (w, b) in enumerate(zip(self.coefs, self.intercepts, strict=True)):
            state[f"{prefix}W{i}"] = np.asarray(w, dtype=np.float64)
            state[f"{prefix}b{i}"] = np.asarray(b, dtype=np.float64)
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str = "") -> MLP:
        """Inverse of `to_state`; a missing array is an ArtifactError naming it."""
        try:
            n = int(state[f"{prefix}n_layers"])
            coefs = tuple(np.asarray(state[f"{prefix}W{i}"], dtype=np.float64) for i in range(n))
            intercepts = tuple(
                np.asarray(state[f"{prefix}b{i}"], dtype=np.float64) for i in range(n)
            )
            y_mean, y_scale = (float(v) for v in state[f"{prefix}y_scaler"])
            activation = str(state[f"{prefix}activation"])
            x_mean = np.asarray(state[f"{prefix}x_mean"], dtype=np.float64)
            x_scale = np.asarray(state[f"{prefix}x_scale"], dtype=np.float64)
        except KeyError as exc:
            raise ArtifactError(f"MLP weights incomplete: array {exc.args[0]!r} missing") from None
        if activation not in ACTIVATIONS:
            raise ArtifactError(f"MLP activation must be one of {ACTIVATIONS}, got {activation!r}")
        return cls(coefs, intercepts, x_mean, x_scale, y_mean, y_scale, activation)


# `MeanMLP` on at most this many rows runs its members side by side as one network (block-
# diagonal weights): one forward pass of a few rows costs ~30 us whatever its width, so the
# members' passes one after another cost that many times more.
STACK_MEMBERS_ROWS = 64


@dataclass(frozen=True)
class _StackedMembers:
    """An ensemble's members as one network with block-diagonal float32 weights: each member's
    standardised inputs side by side, its hidden units beside the others', one output column
    per member. Member i's column is its own forward pass up to the summation order of the
    float32 products (the zero blocks add exact zeros)."""

    means: np.ndarray  # (k * n_in,) float64: each member's x_mean, side by side
    inv_scales: np.ndarray  # (k * n_in,) float64
    hidden: tuple[tuple[np.ndarray, np.ndarray], ...]  # (W (in, out) float32, b (out,) float32)
    w_out: np.ndarray  # (k * width, k) float32: member i's output weights in column i
    b_out: np.ndarray  # (k,) float64
    y_mean: np.ndarray  # (k,) float64
    y_scale: np.ndarray  # (k,) float64
    relu: bool
    n_in: int

    @classmethod
    def of(cls, members: tuple[MLP, ...]) -> _StackedMembers | None:
        """None when the members differ in depth, activation or input count."""
        m0 = members[0]
        if any(
            len(m.coefs) != len(m0.coefs)
            or m.activation != m0.activation
            or m.n_features != m0.n_features
            for m in members
        ):
            return None
        hidden = tuple(
            (
                _block_diag([m.coefs[layer] for m in members]).astype(np.float32),
                np.concatenate([m.intercepts[layer] for m in members]).astype(np.float32),
            )
            for layer in range(len(m0.coefs) - 1)
        )
        return cls(
            np.concatenate([np.asarray(m.x_mean, dtype=np.float64) for m in members]),
            np.concatenate([1.0 / np.asarray(m.x_scale, dtype=np.float64) for m in members]),
            hidden,
            _block_diag([m.coefs[-1][:, :1] for m in members]).astype(np.float32),
            np.array([float(m.intercepts[-1][0]) for m in members]),
            np.array([m.y_mean for m in members]),
            np.array([m.y_scale for m in members]),
            m0.activation == "relu",
            m0.n_features,
        )

    def outputs(self, X: np.ndarray) -> np.ndarray:
        """(n, k): every member's prediction of each row (X (n, n_in), a few rows)."""
        n = len(X)
        k = len(self.b_out)
        m = max(-(-n // MIN_GEMM_ROWS) * MIN_GEMM_ROWS, MIN_GEMM_ROWS)
        z = np.zeros((m, k * self.n_in), dtype=np.float32)
        zs = np.concatenate([X] * k, axis=1) - self.means  # each member's copy of X
        zs *= self.inv_scales
        z[:n] = zs
        h = z
        for w, b in self.hidden:
            h = h @ w
            h += b
            if self.relu:
                np.maximum(h, np.float32(0.0), out=h)
            else:
                np.tanh(h, out=h)
        # the output layer on the padded rows too: a GEMM of fewer rows sums in another order
        y = (h @ self.w_out)[:n].astype(np.float64)
        y += self.b_out
        y *= self.y_scale
        y += self.y_mean
        return y


def _block_diag(blocks: list[np.ndarray]) -> np.ndarray:
    """Matrices along the diagonal of one, zeros elsewhere."""
    rows = sum(b.shape[0] for b in blocks)
    cols = sum(b.shape[1] for b in blocks)
    out = np.zeros((rows, cols), dtype=np.float64)
    r = c = 0
    for b in blocks:
        out[r : r + b.shape[0], c : c + b.shape[1]] = b
        r, c = r + b.shape[0], c + b.shape[1]
    return out


@dataclass(frozen=True)
class MeanMLP:
    """An ensemble: the mean of its members' outputs (each an MLP fitted from another seed).
    For a residual in log space this is the geometric mean of the members' factors."""

    members: tuple[MLP, ...]

    @property
    def n_features(self) -> int:
        return self.members[0].n_features

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if len(X) <= STACK_MEMBERS_ROWS and self._stacked is not None:
            return self._stacked.outputs(X).mean(axis=1)
        out = self.members[0].predict(X)
        for m in self.members[1:]:
            out += m.predict(X)
        out /= len(self.members)
        return out

    @cached_property
    def _stacked(self) -> _StackedMembers | None:
        return _StackedMembers.of(self.members)

    def predict_member(self, X: np.ndarray, member: np.ndarray) -> np.ndarray:
        """Row i from member member[i] alone (one member's cost per row, not the mean's).

        For a sum of predictions weighted so that every member carries an equal share of the
        weight (the decode quadrature's strata, `dse.predict.request.node_strata`), this is an
        estimate of the mean's sum at one member's cost: the members' offsets on a
        configuration none of them saw (what averaging removes) cancel in the sum."""
        X = np.asarray(X, dtype=np.float64)
        n = len(X)
        member = as_shape(member, (n,))
        if n <= STACK_MEMBERS_ROWS and self._stacked is not None:
            return self._stacked.outputs(X)[np.arange(n), member]
        out = np.empty(n)
        cuts = np.flatnonzero(member[1:] != member[:-1]) + 1
        if len(cuts) < RUNS_AS_SLICES:
            # a few runs of one member (the quadrature's nodes come as blocks of rows): row
            # slices, which the forward pass reads without a copy
            for a, b in zip([0, *cuts], [*cuts, n], strict=True):
                out[a:b] = self.members[int(member[a])].predict(X[a:b])
            return out
        by_col = _column_major(X)
        for i, m in enumerate(self.members):
            sel = np.flatnonzero(member == i)
            if len(sel):
                # gathered as column-major when X is (the forward pass's fast layout)
                out[sel] = m.predict(X.T[:, sel].T if by_col else X[sel])
        return out

    def to_state(self, prefix: str = "") -> dict[str, np.ndarray]:
        state = {f"{prefix}n_members": np.array(len(self.members), dtype=np.int64)}
        for i, m in enumerate(self.members):
            state.update(m.to_state(f"{prefix}m{i}/"))
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], prefix: str = "") -> MeanMLP:
        n = int(state[f"{prefix}n_members"])
        return cls(tuple(MLP.from_state(state, f"{prefix}m{i}/") for i in range(n)))


def mlp_from_state(state: dict[str, np.ndarray], prefix: str = "") -> MLP | MeanMLP:
    """An `MLP` or, where the state holds several members, a `MeanMLP`."""
    if f"{prefix}n_members" in state:
        return MeanMLP.from_state(state, prefix)
    return MLP.from_state(state, prefix)


def fit_mlp(
    X: np.ndarray,
    y: np.ndarray,
    *,
    hidden: tuple[int, ...] = (32, 32),
    activation: str = "relu",
    solver: str = "adam",
    alpha: float = 1e-4,
    learning_rate_init: float = 1e-3,
    max_iter: int = 400,
    batch_size: int | str = "auto",
    seed: int = 0,
    sample_weight: np.ndarray | None = None,
    tol: float = 1e-7,
    constant_rtol: float = 1e-9,
) -> MLP:
    """Fit an MLP regressor on standardised X and y (Adam or L-BFGS, no early stopping, seeded).

    scikit-learn is imported here and nowhere on the prediction path; every argument is passed
    by keyword so a change of positional order between sklearn versions cannot bite.
    `sample_weight` needs scikit-learn >= 1.7; it is ignored (with the unweighted fit) on older ones.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).ravel()
    x_mean = X.mean(axis=0)
    x_scale = X.std(axis=0)
    # A column constant up to rounding (std ~1e-13 from summing equal logs) is constant: scale
    # 1, else any other value at prediction time lands ~1e12 standard deviations out.
    # (`constant_rtol=0` keeps only exactly constant columns at scale 1: the Level 2-3 residual
    # MLPs were fitted so, and a refit must give the same weights.)
    x_scale = np.where(x_scale > constant_rtol * np.maximum(np.abs(x_mean), 1.0), x_scale, 1.0)
    y_mean = float(y.mean())
    y_scale = float(y.std()) or 1.0
    reg = MLPRegressor(
        hidden_layer_sizes=tuple(hidden),
        activation=activation,
        solver=solver,
        alpha=alpha,
        learning_rate_init=learning_rate_init,
        max_iter=max_iter,
        batch_size=batch_size,
        random_state=seed,
        tol=tol,
        n_iter_no_change=30,
        early_stopping=False,
        shuffle=True,
        max_fun=max(15000, 20 * max_iter),
    )
    Xs = (X - x_mean) / x_scale
    ys = (y - y_mean) / y_scale
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        try:
            reg.fit(Xs, ys, sample_weight=sample_weight)
        except TypeError:
            reg.fit(Xs, ys)
    return MLP(
        coefs=tuple(np.array(w, dtype=np.float64) for w in reg.coefs_),
        intercepts=tuple(np.array(b, dtype=np.float64) for b in reg.intercepts_),
        x_mean=x_mean,
        x_scale=x_scale,
        y_mean=y_mean,
        y_scale=y_scale,
        activation=activation,
    )


def merge_ensemble(mlps: tuple[MLP, ...]) -> MLP | None:
    """The mean of one-hidden-layer MLPs that share their scalers, as one wider MLP (exact:
    the output layer is linear), so the ensemble costs one forward pass. None if not mergeable."""
    if not mlps:
        return None
    m0 = mlps[0]
    ok = all(
        len(m.coefs) == 2
        and m.activation == m0.activation
        and np.array_equal(m.x_mean, m0.x_mean)
        and np.array_equal(m.x_scale, m0.x_scale)
        and (m.y_mean, m.y_scale) == (m0.y_mean, m0.y_scale)
        for m in mlps
    )
    merged = None
    if ok:
        k = len(mlps)
        merged = MLP(
            coefs=(
                np.concatenate([m.coefs[0] for m in mlps], axis=1),
                np.concatenate([m.coefs[1] for m in mlps], axis=0) / k,
            ),
            intercepts=(
                np.concatenate([m.intercepts[0] for m in mlps]),
                np.mean([m.intercepts[1] for m in mlps], axis=0),
            ),
            x_mean=m0.x_mean,
            x_scale=m0.x_scale,
            y_mean=m0.y_mean,
            y_scale=m0.y_scale,
            activation=m0.activation,
        )
    return merged
