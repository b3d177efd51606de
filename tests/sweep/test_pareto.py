"""dse.pareto on plain arrays: checked against brute force, hand-worked cases and closed forms."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dse import pareto


def brute_nondominated(p: np.ndarray) -> np.ndarray:
    """O(n^2) reference: not dominated, and first of each group of identical rows."""
    n = len(p)
    keep = np.ones(n, dtype=bool)
    for i in range(n):
        if not np.isfinite(p[i]).all():
            keep[i] = False
            continue
        for j in range(n):
            if i == j or not np.isfinite(p[j]).all():
                continue
            if np.all(p[j] <= p[i]) and np.any(p[j] < p[i]):
                keep[i] = False
                break
            if j < i and np.array_equal(p[j], p[i]):
                keep[i] = False
                break
    return keep


@pytest.mark.parametrize("m", [1, 2, 3, 4])
def test_nondominated_matches_brute_force_with_ties_and_nan(m: int) -> None:
    rng = np.random.default_rng(m)
    # Few distinct values per axis, so ties and exact duplicates are frequent.
    p = rng.integers(0, 6, size=(300, m)).astype(float)
    p[rng.random(300) < 0.05, 0] = np.nan
    got = pareto.nondominated(p)
    assert np.array_equal(got, brute_nondominated(p))


def test_keep_duplicates_keeps_every_copy_of_a_front_point() -> None:
    p = np.array([[1, 2], [1, 2], [2, 1], [3, 3], [0.5, 5], [1, 3]], dtype=float)
    assert pareto.nondominated(p).tolist() == [True, False, True, False, True, False]
    assert pareto.nondominated(p, keep_duplicates=True).tolist() == [
        True,
        True,
        True,
        False,
        True,
        False,
    ]


def test_front_indices_respects_feasibility_and_sorts_by_first_objective() -> None:
    p = np.array([[3, 1], [1, 3], [0, 0], [2, 2], [2, 2]], dtype=float)
    feasible = np.array([True, True, False, True, True])
    # The infeasible (0, 0) would dominate everything; without it three points are optimal.
    assert pareto.front_indices(p, feasible).tolist() == [1, 3, 0]


def test_hypervolume_of_a_hand_worked_front() -> None:
    # Normalised by ideal (0, 0) and nadir (2, 2): points (0, 1), (0.5, 0.5), (1, 0); the
    # reference point is (1.1, 1.1). Slabs in x: [0, 0.5), [0.5, 1), [1, 1.1).
    front = np.array([[0, 2], [1, 1], [2, 0]], dtype=float)
    norm = pareto.normalisation(front)
    assert norm is not None
    expected = 0.5 * (1.1 - 1.0) + 0.5 * (1.1 - 0.5) + 0.1 * 1.1  # = 0.46
    assert pareto.hypervolume(front, norm) == pytest.approx(expected)
    # Dominated points and points beyond the reference add nothing.
    more = np.vstack([front, [[2, 2], [5, -1]]])
    assert pareto.hypervolume(more, norm) == pytest.approx(expected)


def test_hypervolume_history_is_monotone_and_ends_at_the_total() -> None:
    rng = np.random.default_rng(0)
    p = rng.random((400, 2))
    feasible = rng.random(400) < 0.8
    front = p[pareto.front_indices(p, feasible)]
    norm = pareto.normalisation(front)
    hist = pareto.hypervolume_history(p, feasible, norm, pareto.checkpoints(400, 20))
    hv = [h for _, h in hist]
    assert hist[-1][0] == 400
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(hv))
    assert hv[-1] == pytest.approx(pareto.hypervolume(front, norm))


def test_knee_of_a_convex_front_is_its_bulge() -> None:
    # On the quarter circle x^2 + y^2 = 1 the point farthest from the chord x + y = 1 is at 45°.
    t = np.linspace(0, np.pi / 2, 91)
    front = np.column_stack([1 - np.sin(t), 1 - np.cos(t)])  # convex towards the ideal
    k = pareto.knee_index(front)
    assert t[k] == pytest.approx(np.pi / 4, abs=np.radians(1.01))
    # Three objectives: the plane through the extremes is used.
    f3 = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 0], [0.2, 0.2, 0.2]], dtype=float)
    assert pareto.knee_index(f3) == 3


def test_nondominated_of_a_million_points_is_exact() -> None:
    rng = np.random.default_rng(1)
    p = rng.random((1_000_000, 2))
    keep = pareto.nondominated(p)
    f = p[keep]
    # Closed form check: sorted by f1, the front's f2 strictly decreases, and no point of the
    # cloud lies strictly below the front's staircase.
    order = np.argsort(f[:, 0])
    assert np.all(np.diff(f[order, 1]) < 0)
    stair = np.searchsorted(f[order, 0], p[:, 0], side="right") - 1
    below = (stair >= 0) & (p[:, 1] < f[order, 1][np.maximum(stair, 0)])
    assert not below.any()


def test_a_flat_front_gets_a_usable_nadir() -> None:
    norm = pareto.normalisation(np.array([[2.0, 100.0]]))
    assert norm is not None
    assert norm.nadir.tolist() == [2.02, 101.0]
    # The one point sits at the ideal; a point 1 % worse in both is at the nadir (1, 1).
    assert norm.apply(np.array([[2.02, 101.0]])).tolist() == [[1.0, 1.0]]
    assert pareto.hypervolume(np.array([[2.0, 100.0]]), norm) == pytest.approx(1.21)


@pytest.mark.parametrize("keep_duplicates", [False, True])
def test_large_sets_drop_the_pivots_dominated_rows_first_with_the_same_front(
    keep_duplicates: bool,
) -> None:
    """Above PIVOT_MIN_ROWS points `nondominated` drops the rows one point dominates before
    moocore sees the rest: the mask equals moocore's on all of them (ties, duplicates, NaN,
    maximised columns, three objectives)."""
    import moocore

    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(pareto.PIVOT_MIN_ROWS + 1, 3 * pareto.PIVOT_MIN_ROWS))
        m = int(rng.integers(2, 4))
        q = rng.integers(0, int(rng.integers(2, 60)), size=(n, m)).astype(float)
        q[rng.random(n) < 0.01, 0] = np.nan
        directions = tuple(rng.choice(["minimize", "maximize"], m))
        signed = q * pareto.signs(directions, m)
        ok = np.isfinite(q).all(axis=1)
        want = np.zeros(n, dtype=bool)
        want[ok] = moocore.is_nondominated(signed[ok], keep_weakly=keep_duplicates)
        got = pareto.nondominated(q, keep_duplicates=keep_duplicates, directions=directions)
        assert np.array_equal(got, want), trial
