"""Search-space YAML: valid files load and count; every kind of mistake gets one located message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.errors import ConfigError
from dse.spec import columns as C
from dse.spec.space import bundled_spaces, count_feasible, load_space, require_feasible

REPO = Path(__file__).resolve().parents[2]
GOOD = """\
name: t
hardware: h100_sxm
workload: {batch_size: 4, prompt_tokens: 128, output_tokens: 32}
space:
  d_model: {values: [1024, 2048]}
  n_layers: {low: 4, high: 8, step: 2}
  n_heads: {values: [8, 16]}
  n_kv_heads: {values: [2, 8]}
  d_ff: 4096
constraints:
  active_params: {max: 1.0e+12}
  fits_memory: true
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "space.yaml"
    p.write_text(text)
    return p


def test_every_bundled_space_loads_and_has_feasible_configurations() -> None:
    names = bundled_spaces()
    assert {"dense_8b", "moe", "heads_study", "gpu_batch"} <= set(names)
    for name in names:
        space = load_space(REPO / "search_spaces" / f"{name}.yaml")
        count = count_feasible(space)
        assert count.feasible and count.feasible > 0, name
        require_feasible(space, count)


def test_enumeration_is_the_cartesian_product(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, GOOD))
    assert space.size() == 2 * 3 * 2 * 2
    cols = space.enumerate()
    assert len(cols["d_model"]) == 24
    combos = {
        (a, b, c, d)
        for a, b, c, d in zip(
            cols["d_model"], cols["n_layers"], cols["n_heads"], cols["n_kv_heads"], strict=True
        )
    }
    assert len(combos) == 24
    assert set(cols["n_layers"]) == {4, 6, 8}
    assert (cols["batch_size"] == 4).all() and (cols["gpu"] == "h100_sxm").all()
    # head_dim defaults to d_model / n_heads
    assert np.array_equal(cols["head_dim"], cols["d_model"] // cols["n_heads"])


def test_counts_match_a_row_by_row_check(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, GOOD.replace("max: 1.0e+12", "max: 2.0e+8")))
    count = count_feasible(space)
    cols = space.enumerate()
    from dse.spec.arch import Architecture, active_params

    by_hand = 0
    for i in range(space.size()):
        a = Architecture(**{k: cols[k][i].item() for k in C.ARCH_FIELDS})
        by_hand += int(active_params(a) <= 2.0e8)
    assert count.feasible == by_hand
    assert 0 < by_hand < space.size()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("n_layers:", "n_layer:"),
            ":6: space.n_layer: unknown key (did you mean 'n_layers'?)",
        ),
        (
            GOOD.replace("{low: 4, high: 8, step: 2}", "{low: 8, high: 4}"),
            ":6: space.n_layers: `low <= high` must hold, but got (low=8, high=4)",
        ),
        (
            GOOD.replace("{values: [8, 16]}", "{values: []}"),
            "space.n_heads.values: must be a non-empty list",
        ),
        (
            GOOD.replace("d_ff: 4096", "d_ff: big"),
            ":9: space.d_ff: must be an integer in [1, 1048576], got 'big'",
        ),
        (
            GOOD.replace("d_ff: 4096", "d_ff: 40.5"),
            "space.d_ff: must be an integer in [1, 1048576], got 40.5",
        ),
        (GOOD.replace("hardware: h100_sxm", "hardware: h100"), ":2: hardware: must be one of"),
        (
            GOOD.replace("{values: [2, 8]}", "{values: [3, 5]}"),
            "space.n_kv_heads: no value divides any n_heads [8, 16], got [3, 5]",
        ),
        (
            GOOD.replace("{values: [1024, 2048]}", "{values: [1003]}"),
            "space.n_heads: no value divides any d_model [1003]",
        ),
        (
            GOOD.replace("{values: [1024, 2048]}", "{values: [1000]}"),
            ":7: space.n_heads: d_model / n_heads (the head_dim) must be an even integer >= 8 "
            "(RoPE rotates pairs) for some pair, got head_dim [125] from d_model [1000]",
        ),
        (
            GOOD + "study: {sampler: tpee}\n",
            "study.sampler: must be one of auto, exact, screened, tpe, nsga2, nsga3, random, gp, exhaustive (did you mean 'tpe'?), got 'tpee'",
        ),
        (
            GOOD + "objectives: {latency: {metric: p99}}\n",
            "objectives.latency.metric: must be one of request, ttft, tpot, got 'p99'",
        ),
        (
            GOOD.replace("max: 1.0e+12", "min: 5.0e+9, max: 1.0e+9"),
            "constraints.active_params: `min <= max` must hold",
        ),
        (
            GOOD.replace("{batch_size: 4,", "{batch_size: 0,"),
            "workload.batch_size: must be an integer in [1, 1048576], got 0",
        ),
        (GOOD.replace("space:", "spaces:"), "spaces: unknown key (did you mean 'space'?)"),
        ("- just\n- a list\n", "expected a YAML mapping at the top level"),
        ("space: [unclosed\n", ": not valid YAML"),
        ("", "file is empty"),
    ],
)
def test_bad_input_gets_one_located_message(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_space(path)
    assert expected in str(exc.value)
    assert str(path) in str(exc.value)


def test_space_with_no_feasible_configuration_is_an_error(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, GOOD.replace("max: 1.0e+12", "max: 1000")))
    count = count_feasible(space)
    assert count.feasible == 0
    with pytest.raises(ConfigError, match="no configuration satisfies them; active_params_max"):
        require_feasible(space, count)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_space(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_space(tmp_path)


def test_bundled_space_by_name() -> None:
    assert load_space("dense_8b").name == "dense-8b"
