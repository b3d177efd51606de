"""The exact sweep's shortcuts outside the predictor give what the long way gives:
- `Configs.take(rows, same=...)`: the columns named share their first rows instead of a gather;
- `space_index.constant_columns`: the columns it names hold one value in every configuration;
- `_trials.created_trials(parsed=...)` / `trials_table(parsed=...)`: the JSON attributes parsed
  once, when they are printed, not again when the table is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dse.spec import columns as C
from dse.spec.space import load_space
from dse.sweep import _enumerate as E
from dse.sweep import _trials as T
from dse.sweep.space_index import constant_columns, space_columns

REPO = Path(__file__).resolve().parents[2]
SPACES = sorted(
    [
        *(REPO / "search_spaces").glob("*.yaml"),
        *(REPO / "examples").glob("*.yaml"),
        REPO / "benchmarks" / "sweep_3m_space.yaml",
    ]
)

# 2 x 2 x 2 = 8 configurations, n_heads 48 invalid with d_model 2048 (told FAIL)
SMALL = """\
name: small
hardware: h100_sxm
workload:
  batch_size: {values: [1, 16]}
  prompt_tokens: 1024
  output_tokens: 256
  tensor_parallel: 1
space:
  d_model: {values: [2048, 3072]}
  n_layers: 16
  n_heads: {values: [32, 48]}
  n_kv_heads: 8
  d_ff: 8192
  vocab_size: 128256
constraints:
  fits_memory: true
objectives:
  latency: {metric: tpot}
  energy: {source: hymell, metric: per_output_token}
study: {sampler: exact, trials: 8, seed: 0}
"""


def _configs(n: int) -> C.Configs:
    rng = np.random.default_rng(0)
    cols, _ = C.as_columns(
        {
            "d_model": rng.choice([2048, 4096], n),
            "n_layers": np.full(n, 32),
            "n_heads": np.full(n, 32),
            "d_ff": rng.choice([8192, 14336], n),
            "gpu": np.array(["h100_sxm"] * n),
            "batch_size": rng.choice([1, 8, 64], n),
        }
    )
    return cols


@pytest.mark.parametrize(
    "rows",
    [
        np.array([3, 0, 7, 7, 2]),
        np.arange(10) % 3 == 0,  # a boolean mask
        np.array([], dtype=np.int64),
        np.array([1] * 25),  # more rows than the batch: gathered, not a view
    ],
    ids=["index", "mask", "none", "repeats"],
)
def test_take_same_equals_the_gather(rows: np.ndarray) -> None:
    cols = _configs(10)
    same = {"n_layers", "n_heads", "gpu", "vocab_size", "norm", "attention_pattern"}
    want = cols.take(rows)
    got = cols.take(rows, same=same)
    assert got.n == want.n and list(got) == list(want)  # same rows, columns in the same order
    for k in want:
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
        assert not got[k].flags.writeable, k  # checked columns stay read-only
    assert not cols["n_layers"].flags.writeable  # the source is untouched, still frozen


def test_take_same_shares_the_rows_of_constant_columns() -> None:
    cols = _configs(10)
    got = cols.take(np.array([5, 6]), same={"n_layers"})
    assert np.shares_memory(got["n_layers"], cols["n_layers"])  # a view, no copy
    assert not np.shares_memory(got["d_model"], cols["d_model"])  # gathered


@pytest.mark.parametrize("path", SPACES, ids=[p.stem for p in SPACES])
def test_constant_columns_hold_one_value_in_every_configuration(path: Path) -> None:
    """The scan gives the predictor the first rows of these columns, whatever rows it
    predicts: a column named here that varies would give it wrong configurations."""
    space = load_space(path)
    size = space.size()
    rng = np.random.default_rng(1)
    idx = np.unique(np.concatenate([[0, size - 1], rng.integers(0, size, min(size, 4000))]))
    cols = space_columns(space, idx)
    const = constant_columns(space)
    assert const <= set(cols)
    assert len(const) > 20  # most of the ~50 columns: the shortcut has something to share
    for k in const:
        v = np.asarray(cols[k])
        assert all(x == v[0] for x in v.tolist()), k  # object patterns compare as lists
    searched = {p.name for p in space.searched}
    assert not const & searched


def test_rows_remember_their_parse_only_when_it_equals_them() -> None:
    parsed: T.Parsed = {}
    table = {
        "a": np.array([1.5, np.nan, np.inf, -0.0, 1e16, 5e-324]),
        "b": np.arange(6),
        "c": np.array(["x", "é", 'q"', "", "1", "y"]),
        "d": np.array([True, False] * 3),
        "e": np.array([None, 1.0, "t", None, 2, False], dtype=object),
    }
    texts = T._rows(table, 6, parsed)
    assert len(parsed) == 6
    for text in texts:
        assert text is not None
        # equal to its parse (NaN is not equal to itself: compared as text)
        assert json.dumps(parsed[text]) == json.dumps(json.loads(text))
        assert [type(v) for v in parsed[text].values()] == [
            type(v) for v in json.loads(text).values()
        ]
    # a value JSON gives back as another type (a tuple comes back a list): nothing remembered
    other: T.Parsed = {}
    T._rows({"t": np.array([(1, 2), None], dtype=object)}, 2, other)
    assert other == {}


def test_trials_table_with_the_parse_equals_the_table_parsed_back(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    space = load_space(path)
    parsed: T.Parsed = {}
    trials = E.record_trials(space, np.arange(space.size()), parsed=parsed)
    assert parsed  # the predictions (and tokens-to-Wh) of the valid trials
    assert {t.state.name for t in trials} == {"COMPLETE", "FAIL"}
    want = T.trials_table(trials, space)
    got = T.trials_table(trials, space, parsed)
    pd.testing.assert_frame_equal(got, want)
    assert got.to_csv(index=False) == want.to_csv(index=False)
    # a parse that is not the text's is used as given: the table does read the memo
    text = trials[0].user_attrs.get("pred") or next(
        t.user_attrs["pred"] for t in trials if "pred" in t.user_attrs
    )
    wrong = {**parsed, text: {**parsed[text], "latency_s": -1.0}}
    assert (T.trials_table(trials, space, wrong)["pred.latency_s"] == -1.0).any()


def test_an_exact_sweep_writes_what_the_long_way_writes(tmp_path: Path) -> None:
    """End to end: trials.csv is the table of the study's trials parsed back from the journal
    (no memo), and exact_front.csv (copied) is front.csv, which is the front table formatted."""
    import optuna

    from dse.sweep import SweepOptions, run_sweep
    from dse.sweep.results import write_table

    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    out = tmp_path / "r"
    outcome = run_sweep(SweepOptions(space_file=path, out=out, quiet=True))
    assert outcome.written is not None and not outcome.interrupted
    study = optuna.load_study(
        study_name="small",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(out / "journal.log"))
        ),
    )
    table = T.trials_table(study.get_trials(), load_space(path))
    table["on_front"] = outcome.written.table["on_front"]
    write_table(table, tmp_path / "want.csv")
    assert (out / "trials.csv").read_bytes() == (tmp_path / "want.csv").read_bytes()
    write_table(outcome.written.front, tmp_path / "front.csv")
    front = (tmp_path / "front.csv").read_bytes()
    assert (out / "front.csv").read_bytes() == front
    assert (out / "exact_front.csv").read_bytes() == front


@pytest.mark.parametrize("state", ["COMPLETE", "FAIL"])
def test_finished_trial_is_optunas_create_trial(state: str) -> None:
    """`_trials.finished_trial` skips only create_trial's conversion of deprecated
    distribution kinds (none here): a change in Optuna's create_trial shows here."""
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution
    from optuna.trial import TrialState

    dists = {
        "gpu": CategoricalDistribution(["h100_sxm", "a100_sxm"]),
        "n_layers": IntDistribution(16, 76, step=4),
        "d_model": CategoricalDistribution([2048, 4096]),
    }
    params = {"gpu": "a100_sxm", "n_layers": 20, "d_model": 4096}
    s = TrialState[state]
    values = [0.5, 2.0] if s == TrialState.COMPLETE else None
    attrs = {"sizes": {"total_params": 1.0}, "feasible": False, "pred": '{"a":1}'}
    cons = {"fits_memory": -1.0, "active_params_max": 0.5}
    want = optuna.trial.create_trial(
        state=s,
        values=values,
        params=params,
        distributions=dists,
        user_attrs=attrs,
        constraints=cons,
    )
    got = T.finished_trial(s, values, params, dists, attrs, cons)
    fields = [
        "number",
        "state",
        "values",
        "params",
        "distributions",
        "user_attrs",
        "system_attrs",
        "intermediate_values",
        "constraints",
        "_trial_id",
    ]
    for f in fields:
        assert getattr(got, f) == getattr(want, f), f
    assert got.datetime_start is not None and got.datetime_complete == got.datetime_start
    assert got.distributions is not dists  # a trial's own dict, as create_trial gives
    study = optuna.create_study(directions=["minimize", "minimize"])
    study.add_trial(got)  # the storage takes it as it takes create_trial's
    (back,) = study.get_trials()
    assert (back.state, back.params, back.user_attrs, back.constraints) == (
        want.state,
        want.params,
        want.user_attrs,
        want.constraints,
    )


@pytest.mark.parametrize("sync", [True, False])
def test_the_sidecar_reads_back_synced_or_not(tmp_path: Path, sync: bool) -> None:
    """`Enumeration.save(sync=False)` (between the once-a-second fsyncs) writes the same state,
    renamed into place, no temporary file left; an empty sidecar (an unsynced save cut by an
    operating-system crash) reads as no state: the enumeration starts again."""
    key = {"study": "s", "space_hash": "h", "size": 1000, "chunk": 100}
    st = E.Enumeration.new(key, 2, ("minimize", "minimize"))
    st.index, st.objectives = np.array([3, 7]), np.array([[1.0, 2.0], [2.0, 1.0]])
    st.done[[0, 4]] = True
    st.total, st.valid, st.feasible, st.elapsed_s = 200, 150, 120, 1.5
    path = tmp_path / E.PROGRESS_FILE
    st.save(path, sync=sync)
    assert sorted(p.name for p in tmp_path.iterdir()) == [E.PROGRESS_FILE]
    back = E.Enumeration.load(path, ("minimize", "minimize"))
    assert back is not None and back.key == key
    np.testing.assert_array_equal(back.done, st.done)
    np.testing.assert_array_equal(back.index, st.index)
    np.testing.assert_array_equal(back.objectives, st.objectives)
    assert (back.total, back.valid, back.feasible, back.elapsed_s) == (200, 150, 120, 1.5)
    path.write_bytes(b"")
    assert E.Enumeration.load(path, None) is None
    path.write_bytes(b"PK\x03\x04 not a zip")
    assert E.Enumeration.load(path, None) is None
