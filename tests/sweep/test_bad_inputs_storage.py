"""A catalogue of bad inputs to the YAML reader, study names, results folders and journals.

Each case runs the real command (`dse.cli.main`, in process) on real files and asserts exit
code 2 with one message that names the file (and line) or the flag/key, the rule and the
value, and no traceback, or, where recovery is the right answer (a damaged journal), a clean
recovery whose stderr names each lost line. The alias bombs run in a subprocess under a memory
and time limit, so a regression fails the test instead of hanging the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_sweep import SMALL

from dse.cli import main
from dse.sweep import SweepOptions, run_sweep
from dse.sweep._journal_scan import LOST_ATTR, scan_journal

# slow: minutes on a 2-core VM (fits, sweeps, builds); `pytest -m "not slow"` leaves it out
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def refused(args: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    rc, _, err = run(args, capsys)
    assert rc == 2, err
    assert err.count("error:") == 1, err
    for needle in needles:
        assert re.search(needle, err), f"{needle!r} not in {err!r}"
    return err


# ------------------------------------------------------------------ YAML documents
GOOD_HEAD = "name: ok\nspace:\n  d_model: {values: [4096]}\n"
LAUGHS = "".join(
    f"{a}: &{a} [" + ",".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
    for p, a in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)
MANY_ALIASES = "x: &x 1\nl: [" + ", ".join(["*x"] * 101) + "]\n"
WIDE_BOMB = (
    "a: &a ["
    + ",".join(['"' + "x" * 10 + '"'] * 50)
    + "]\n"
    + "".join(
        f"{b}: &{b} [" + ",".join([f"*{p}"] * 20) + "]\n"
        for p, b in (("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"))
    )
)

# (id, document bytes, regex the one message must match; FILE stands for the file's path)
YAML_CASES: list[tuple[str, bytes, str]] = [
    (
        "dup-top",
        b"name: a\nname: b\nspace: {}\n",
        r"FILE:2: name: duplicate key \(first at line 1\)",
    ),
    (
        "dup-depth2",
        b"name: a\nspace:\n  d_model: {values: [1]}\n  d_model: {values: [2]}\n",
        r"FILE:4: space\.d_model: duplicate key \(first at line 3\)",
    ),
    (
        "dup-depth3",
        b"space:\n  d_model:\n    values: [1]\n    values: [2]\n",
        r"FILE:4: space\.d_model\.values: duplicate key \(first at line 3\)",
    ),
    (
        "dup-depth4",
        b"space:\n  moe:\n    n_experts:\n      values: [1]\n      low: 1\n      low: 2\n",
        r"FILE:6: space\.moe\.n_experts\.low: duplicate key \(first at line 5\)",
    ),
    ("dup-flow", b"space: {d_model: 1, d_model: 2}\n", r"FILE:1: space\.d_model: duplicate key"),
    (
        "dup-in-list",
        b"items:\n  - {a: 1, b: 2}\n  - a: 1\n    a: 3\n",
        r"FILE:4: items\.1\.a: duplicate key \(first at line 3\)",
    ),
    (
        "dup-workload",
        b"workload:\n  batch_size: 1\n  prompt_tokens: 8\n  batch_size: 2\n",
        r"FILE:4: workload\.batch_size: duplicate key \(first at line 2\)",
    ),
    ("dup-quoted", b"'name': a\n\"name\": b\n", r"FILE:2: name: duplicate key \(first at line 1\)"),
    ("alias-count", MANY_ALIASES.encode(), r"FILE:2: alias \*x: at most 100 aliases per document"),
    (
        "alias-expansion",
        WIDE_BOMB.encode(),
        r"FILE:\d+: aliases: the document may expand to at most 100000 values, got \d+",
    ),
    ("alias-recursive", b"a: &a [1, *a]\n", r"FILE:1: alias: must not refer to .* recursive alias"),
    ("alias-undefined", b"a: *nope\n", r"FILE:1: not valid YAML \(found undefined alias"),
    (
        "huge-file",
        b"name: big\n" + b"# " + b"x" * (1 << 20) + b"\n",
        r"FILE: file size: at most 1048576 bytes \(1 MiB\) for a YAML document, got 1048589",
    ),
    (
        "huge-line",
        b"name: '" + b"y" * (1 << 20) + b"'\n",
        r"FILE: file size: at most 1048576 bytes",
    ),
    ("tab-indent", b"space:\n\td_model: 1\n", r"FILE:2: not valid YAML \(.*'\\t'.*not tabs\)"),
    ("tab-after-key", b"space:\n  d_model:\t\t{values: [1]}\n\tx: 1\n", r"FILE:2: .*not tabs"),
    (
        "non-utf8",
        b"name: caf\xe9\nspace: {}\n",
        r"FILE:1: encoding: must be UTF-8 text, got byte 0xe9 at column 10",
    ),
    ("utf16", "name: a\n".encode("utf-16"), r"FILE:1: encoding: must be UTF-8 text, got byte 0xff"),
    (
        "nul-byte",
        b"name: a\nspace: \x00\n",
        r"FILE:2: not valid YAML \(character 0x0000 is not allowed in YAML\)",
    ),
    ("empty", b"", r"FILE: file is empty, expected a YAML mapping"),
    ("only-comments", b"# nothing\n# here\n", r"FILE: file is empty"),
    (
        "only-marker",
        b"---\n",
        r"FILE:\d+: expected a YAML mapping at the top level .*got nothing \(an empty document\)",
    ),
    ("top-list", b"- a\n- b\n", r"FILE:1: expected a YAML mapping at the top level .*got a list"),
    ("top-scalar", b"42\n", r"FILE:1: expected a YAML mapping .*got a single value"),
    ("top-string", b"just words\n", r"FILE:1: expected a YAML mapping .*got a single value"),
    (
        "deep-lists",
        b"a: " + b"[" * 200 + b"]" * 200 + b"\n",
        r"FILE:1: nesting: at most 64 levels deep, got 65",
    ),
    (
        "deep-maps",
        "".join("  " * i + f"k{i}:\n" for i in range(80)).encode() + b"  " * 80 + b"v: 1\n",
        r"FILE:\d+: nesting: at most 64 levels deep, got 65",
    ),
    (
        "two-documents",
        b"name: a\n---\nname: b\n",
        r"FILE:2: not valid YAML \(expected a single document in the stream, but found another",
    ),
    ("unclosed-flow", b"space: {d_model: [1, 2\n", r"FILE:2: not valid YAML"),
    ("bad-indent", b"space:\n  d_model: 1\n d_ff: 2\n", r"FILE:3: not valid YAML"),
    (
        "bad-timestamp",
        b"name: a\nwhen: 2020-02-30\n",
        r"FILE: not valid YAML \(day is out of range",
    ),
    (
        "name-dotdot",
        GOOD_HEAD.replace("ok", "../../x").encode(),
        r"FILE:1: name: must be letters, digits.*got '\.\./\.\./x'",
    ),
    ("name-slash", GOOD_HEAD.replace("ok", "a/b").encode(), r"FILE:1: name: must be .*got 'a/b'"),
    (
        "name-hidden",
        GOOD_HEAD.replace("ok", ".hidden").encode(),
        r"FILE:1: name: .*not starting with '\.'.*got '\.hidden'",
    ),
    (
        "name-space",
        GOOD_HEAD.replace("ok", "'my study'").encode(),
        r"FILE:1: name: must be .*got 'my study'",
    ),
    (
        "name-long",
        GOOD_HEAD.replace("ok", "n" * 101).encode(),
        r"FILE:1: name: .*at most 100 characters.*got 'n{101}'",
    ),
]


@pytest.mark.parametrize(
    ("doc", "pattern"), [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES]
)
def test_bad_yaml_is_one_located_message(
    doc: bytes, pattern: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "space.yaml"
    path.write_bytes(doc)
    err = refused(["check", str(path)], capsys)
    assert re.search(pattern.replace("FILE", re.escape(str(path))), err), err


BOMB_RUNNER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from dse.cli import main
sys.exit(main(["check", sys.argv[1]]))
"""


@pytest.mark.parametrize(
    "doc",
    [
        LAUGHS,
        # the same bomb through a mapping (merge keys) instead of lists
        "a: &a {x: 1, y: 2, z: 3, w: 4, v: 5, u: 6, t: 7, s: 8, r: 9}\n"
        + "".join(
            f"{b}: &{b} [" + ",".join([f"*{p}"] * 9) + "]\n"
            for p, b in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        # the bomb as the value of a real key of a search space
        GOOD_HEAD + "study:\n  " + LAUGHS.replace("\n", "\n  ").rstrip() + "\n",
    ],
    ids=["billion-laughs", "laughs-of-mappings", "laughs-inside-a-space"],
)
def test_an_alias_bomb_fails_fast_in_bounded_memory(doc: str, tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(doc)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", BOMB_RUNNER, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert re.search(rf"{re.escape(str(path))}:\d+: ", proc.stderr), proc.stderr
    assert "aliases" in proc.stderr


# ------------------------------------------------------------------ study names
SPACE_FILE = "small.yaml"


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / SPACE_FILE).write_text(SMALL)
    monkeypatch.chdir(tmp_path)
    return tmp_path


BAD_NAMES = ["../../x", "a/b", "/abs", ".hidden", "..", "", "a b", "x" * 101, "tab\tname", "é"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[f"study-{i}" for i in range(len(BAD_NAMES))])
def test_a_study_name_that_could_leave_results_is_refused(
    name: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in in_tmp.parent.iterdir())
    err = refused(["sweep", SPACE_FILE, "--study", name, "-q"], capsys, r"--study: must be letters")
    assert f"got {name!r}" in err
    assert not (in_tmp / "results").exists()
    assert sorted(p.name for p in in_tmp.parent.iterdir()) == before


def test_a_bad_name_from_the_file_name_is_refused(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = in_tmp / "my space.yaml"
    odd.write_text(SMALL.replace("name: small\n", ""))
    refused(
        ["sweep", str(odd), "-q"],
        capsys,
        re.escape(f"{odd}: name (none given: the file's name is used): must be letters"),
        r"got 'my space'; give --study NAME",
    )


def test_a_results_link_that_leaves_the_root_is_refused(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = in_tmp / "elsewhere"
    outside.mkdir()
    (in_tmp / "results").mkdir()
    (in_tmp / "results" / "small").symlink_to(outside)
    refused(
        ["sweep", SPACE_FILE, "-q"],
        capsys,
        r"results/small: the results folder must stay under results/",
    )
    assert not any(outside.iterdir())


# ------------------------------------------------------------------ results folders
@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real sweep of the small space (48 trials): results folder with its journal."""
    root = tmp_path_factory.mktemp("base")
    space = root / SPACE_FILE
    space.write_text(SMALL)
    out = root / "results" / "small"
    run_sweep(SweepOptions(space_file=space, out=out, quiet=True))
    return out


@pytest.fixture
def folder(base: Path, in_tmp: Path) -> Path:
    dest = in_tmp / "results" / "small"
    shutil.copytree(base, dest)
    return dest


def _write(name: str, text: str | bytes | None) -> Callable[[Path], None]:
    def change(d: Path) -> None:
        if text is None:
            (d / name).unlink()
        elif isinstance(text, bytes):
            (d / name).write_bytes(text)
        else:
            (d / name).write_text(text)

    return change


def _format_version(version: int) -> Callable[[Path], None]:
    """summary.json as written, but of another format version (its time kept: not stale)."""

    def change(d: Path) -> None:
        path = d / "summary.json"
        stat = path.stat()
        summary = json.loads(path.read_text())
        summary["format_version"] = version
        path.write_text(json.dumps(summary))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    return change


def _truncated(name: str) -> Callable[[Path], None]:
    """The first half of a file, as a full disk or a killed copy leaves it."""

    def change(d: Path) -> None:
        data = (d / name).read_bytes()
        (d / name).write_bytes(data[: len(data) // 2])

    return change


FOLDER_CASES: list[tuple[str, str, Callable[[Path], None], str]] = [
    (
        "show-summary-garbage",
        "show",
        _write("summary.json", "{not json"),
        r"summary\.json: must be the JSON summary .*got unreadable text",
    ),
    (
        "show-summary-list",
        "show",
        _write("summary.json", "[1, 2]"),
        r"summary\.json: must hold a JSON object, got list",
    ),
    (
        "show-summary-no-objectives",
        "show",
        _write("summary.json", '{"study": "small", "format_version": 1}'),
        r"summary\.json: objectives: must list",
    ),
    (
        "show-summary-binary",
        "show",
        _write("summary.json", b"\xff\xfe\x00"),
        r"summary\.json: must be the JSON summary",
    ),
    (
        "show-front-missing",
        "show",
        _write("front.csv", None),
        r"front\.csv: missing \(the sweep did not finish",
    ),
    (
        "show-front-empty",
        "show",
        _write("front.csv", ""),
        r"front\.csv: must be the front table .*empty file",
    ),
    (
        "show-front-columns",
        "show",
        _write("front.csv", "a,b\n1,2\n"),
        r"front\.csv: columns: must hold number",
    ),
    (
        "report-summary-garbage",
        "report",
        _write("summary.json", "{not json"),
        r"summary\.json: must be the JSON summary .*got unreadable text",
    ),
    # Issue 32: `dse show` refuses what `dse report` refuses, with the same message.
    *(
        (f"{command}-format-version-99", command, _format_version(99), pattern)
        for command in ("show", "report", "export")
        for pattern in [r"summary\.json: format_version must be 1, got 99: .*newer dse"]
    ),
    *(
        (f"{command}-trials-truncated", command, _truncated("trials.parquet"), pattern)
        for command in ("show", "report", "export")
        for pattern in [r"trials\.parquet: cannot be read"]
    ),
    ("report-summary-missing", "report", _write("summary.json", None), r"summary\.json is missing"),
    (
        "export-summary-list",
        "export",
        _write("summary.json", "[]"),
        r"summary\.json: must hold a JSON object",
    ),
]


@pytest.mark.parametrize(
    ("command", "change", "pattern"),
    [c[1:] for c in FOLDER_CASES],
    ids=[c[0] for c in FOLDER_CASES],
)
def test_a_broken_results_folder_is_one_message(
    command: str,
    change: Callable[[Path], None],
    pattern: str,
    folder: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    change(folder)
    refused([command, str(folder)], capsys, pattern)


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        (
            ["studies", "--results", "/nonexistent/dse"],
            r"/nonexistent/dse: --results: must be an existing folder",
        ),
        (
            ["studies", "--results", SPACE_FILE],
            r"small\.yaml: --results: must be a folder of results, got a file",
        ),
        (["show", "nowhere"], r"nowhere: neither a results folder"),
        (["show", SPACE_FILE], r"small\.yaml: is a file"),
        (
            ["show", "empty"],
            r"empty: must be a results folder written by `dse sweep`, got a folder with no",
        ),
        (["report", "nowhere"], r"nowhere: results folder does not exist"),
        (["report", SPACE_FILE], r"small\.yaml: must be a results folder .*got a file"),
        (["report", "empty"], r"empty: not a results folder"),
        (["export", "nowhere"], r"nowhere: results folder does not exist"),
        (["export", "empty"], r"empty: not a results folder"),
        (["show", "x", "--storage", "journal:missing.log"], r"no journal file at"),
        (["show", "x", "--storage", "journal:empty"], r"journal:empty: is a folder"),
        (
            ["studies", "--storage", "journal:notes.log"],
            r"notes\.log:1: must be an Optuna journal .*got no usable record in 2 lines \(line 1: not JSON at column 1",
        ),
    ],
    ids=lambda v: None,
)
def test_a_missing_or_wrong_results_path_is_one_message(
    args: list[str], pattern: str, in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (in_tmp / "empty").mkdir()
    (in_tmp / "notes.log").write_text("hello\nworld\n")
    refused(args, capsys, pattern)
    assert (in_tmp / "notes.log").read_text() == "hello\nworld\n"  # never rewritten


def test_studies_without_a_results_folder_or_with_an_empty_one_lists_none(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(["studies"], capsys)  # the default root, before any sweep
    assert rc == 0 and "no studies under results/" in out
    (in_tmp / "empty").mkdir()
    rc, out, _ = run(["studies", "--results", "empty"], capsys)
    assert rc == 0 and "no studies under empty/" in out


def test_a_second_study_into_a_used_folder_is_refused_unless_replace(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = (folder / "summary.json").read_text()
    refused(
        ["sweep", SPACE_FILE, "--study", "other", "--out", str(folder), "-q", "--no-report"],
        capsys,
        re.escape(f"{folder}: holds study 'small'; use another --out or --study, or --replace"),
        r"got study 'other'",
    )
    assert (folder / "summary.json").read_text() == summary
    # resuming the study the folder holds still works (nothing to run: the budget is met)
    rc, _, err = run(["sweep", SPACE_FILE, "-q", "--no-report"], capsys)
    assert rc == 0, err
    rc, _, err = run(
        [
            "sweep",
            SPACE_FILE,
            "--study",
            "other",
            "--out",
            str(folder),
            "-q",
            "--no-report",
            "--replace",
        ],
        capsys,
    )
    assert rc == 0, err
    assert json.loads((folder / "summary.json").read_text())["study"] == "other"
    names = [s for s in (folder / "journal.log").read_text().splitlines() if '"op_code":0,' in s]
    assert len(names) == 1 and '"study_name":"other"' in names[0]


# ------------------------------------------------------------------ damaged journals
def _lines(journal: Path) -> list[bytes]:
    return journal.read_bytes().split(b"\n")[:-1]


def _first(lines: list[bytes], needle: bytes) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


def _put(journal: Path, lines: list[bytes], tail: bytes = b"\n") -> None:
    journal.write_bytes(b"\n".join(lines) + tail)
    committed = journal.with_name("journal.log.committed")
    committed.unlink(missing_ok=True)  # as a user's edit or a copy would leave it


Damage = Callable[[Path], tuple[int, str]]


def trial_middle(j: Path) -> tuple[int, str]:
    """The issue's case: a trial record damaged in the middle of a stored attribute."""
    lines = _lines(j)
    i = _first(lines, b'"op_code":4,') + 5
    lines[i] = lines[i][:2000] + b"\x00\x01" + lines[i][2010:]
    _put(j, lines)
    return i + 1, r"trial 5 of study 'small' lost"


def garbage_inserted(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    i = _first(lines, b'"op_code":4,') + 10
    lines.insert(i, b"\x8f\xa0 this is not a journal line \xff")
    _put(j, lines)
    return i + 1, r"record unreadable \(not UTF-8 text\), skipped: what it recorded cannot be told"


def study_attr(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    i = _first(lines, b'"dse:space_hash"')
    lines[i] = lines[i].replace(b'"dse:space_hash":"', b'"dse:space_hash":')
    _put(j, lines)
    return i + 1, r"study 'small' lost its user attribute 'dse:space_hash'"


def study_creation(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    lines[0] = lines[0][:40]
    _put(j, lines)
    return 1, r"the creation of a study lost; its later records are kept under the name 'small'"


def torn_tail(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    _put(j, [*lines[:-1], lines[-1][:100]], tail=b"")
    return len(lines), r"last record cut short"


def cut_in_half(j: Path) -> tuple[int, str]:
    data = j.read_bytes()
    half = data[: len(data) // 2]
    j.write_bytes(half)
    j.with_name("journal.log.committed").unlink()
    return half.count(b"\n") + 1, r"last record cut short"


def empty_line(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    lines.insert(20, b"")
    _put(j, lines)
    return 21, r"empty line, skipped: nothing lost"


def not_a_record(j: Path) -> tuple[int, str]:
    lines = _lines(j)
    lines.insert(15, b'{"op_code": 99, "worker_id": "x"}')
    _put(j, lines)
    return 16, r"not an Optuna journal record"


def bad_field(j: Path) -> tuple[int, str]:
    """Valid JSON whose fields Optuna cannot apply (a distribution that is not one)."""
    lines = _lines(j)
    i = _first(lines, b'"op_code":4,') + 2
    rec = json.loads(lines[i])
    rec["distributions"] = {"d_model": "no distribution"}
    lines[i] = json.dumps(rec, separators=(",", ":")).encode()
    _put(j, lines)
    return (
        i + 1,
        r"not a usable journal record: a field is not JSON .*trial 2 of study 'small' lost",
    )


def zeroed_block(j: Path) -> tuple[int, str]:
    """A disk block of zeros in place of part of a record (same length)."""
    data = bytearray(j.read_bytes())
    lines = _lines(j)
    i = _first(lines, b'"op_code":4,') + 20
    start = sum(len(x) + 1 for x in lines[:i]) + 100
    data[start : start + 512] = bytes(512)
    j.write_bytes(bytes(data))
    return i + 1, r"trial 20 of study 'small' lost"


DAMAGES: list[Damage] = [
    trial_middle,
    garbage_inserted,
    study_attr,
    study_creation,
    torn_tail,
    cut_in_half,
    empty_line,
    not_a_record,
    bad_field,
    zeroed_block,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__ for d in DAMAGES])
def test_studies_lists_a_damaged_journal_and_names_the_lost_line(
    damage: Damage, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (folder / "journal.log").read_bytes()
    line, detail = damage(folder / "journal.log")
    damaged = (folder / "journal.log").read_bytes()
    rc, out, err = run(["studies"], capsys)
    assert rc == 0, err
    assert re.search(r"^small +\d+", out, re.M), out
    assert f"journal.log:{line}: " in err, err
    assert re.search(detail, err), err
    assert (folder / "journal.log").read_bytes() == damaged  # reading never writes
    assert before != damaged


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.__name__ for d in DAMAGES])
def test_resume_recovers_a_damaged_journal_and_keeps_the_damaged_file(
    damage: Damage, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = folder / "journal.log"
    line, detail = damage(journal)
    damaged = journal.read_bytes()
    rc, _, err = run(["sweep", SPACE_FILE, "-q", "--no-report"], capsys)
    assert rc == 0, err
    assert f"journal.log:{line}: " in err and re.search(detail, err), err
    kept = list(folder.glob("journal.log.damaged-*"))
    if "cut short" in detail:  # a torn last line is cut in place (what a crash leaves)
        assert not kept
    else:
        assert len(kept) == 1 and kept[0].read_bytes() == damaged
        assert f"the damaged file is kept as {kept[0].name}" in err
    assert scan_journal(journal).losses == []
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["study"] == "small"
    # the budget is met again (a lost trial is a failed placeholder plus one more trial)
    rc, out, err = run(["studies"], capsys)
    assert rc == 0 and "warning" not in err, err
    assert re.search(r"^small +(48|49) +\d+ +0 +48 ", out, re.M), out
    rc, _, err = run(["sweep", SPACE_FILE, "-q", "--no-report"], capsys)
    assert rc == 0 and err == "", err


@pytest.mark.parametrize(
    ("flags", "shown"),
    [(["--seed", "7"], "seed=0"), (["--batch-size", "8"], "batch_size=16")],
    ids=["other-seed", "other-batch"],
)
def test_a_lost_record_is_not_restored_from_a_different_command(
    flags: list[str], shown: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study_attr(folder / "journal.log")
    refused(
        ["sweep", SPACE_FILE, "-q", "--no-report", *flags],
        capsys,
        rf"study 'small': its record lost dse:space_hash, and {shown} it kept differs",
    )


def test_placeholders_keep_later_trial_numbers(folder: Path) -> None:
    journal = folder / "journal.log"
    line, _ = trial_middle(journal)
    scan = scan_journal(journal)
    created = [log for log in scan.logs() if log["op_code"] == 4]
    assert len(created) == 48
    assert created[5]["user_attrs"] == {LOST_ATTR: f"journal.log:{line}"}
    assert created[6] == json.loads(_lines(journal)[line])  # the next trial, untouched


@pytest.mark.parametrize(
    "content",
    [b"hello\nworld\n", b"\x00" * 1000, b"[1, 2, 3]\n", b"\xff\xfe\xfd\n"],
    ids=["text", "zeros", "json-list", "binary"],
)
def test_a_journal_with_no_usable_record_is_refused_and_left_alone(
    content: bytes, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = folder / "journal.log"
    journal.write_bytes(content)
    (folder / "journal.log.committed").unlink()
    refused(
        ["sweep", SPACE_FILE, "-q", "--no-report"],
        capsys,
        re.escape(f"{journal}:1: must be an Optuna journal (one JSON record a line), got no "),
    )
    assert journal.read_bytes() == content


def test_show_and_report_say_when_the_journal_is_newer_than_the_results(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A resume that appended trials and died before writing its results.
    rc, _, err = run(
        ["sweep", SPACE_FILE, "-q", "--no-report", "--trials", "64", "--out", "grown"], capsys
    )
    assert rc == 0, err
    shutil.copy(Path("grown") / "journal.log", folder / "journal.log")
    shutil.copy(Path("grown") / "journal.log.committed", folder / "journal.log.committed")
    os.utime(folder / "summary.json", ns=(1, 1))
    rc, out, err = run(["show", str(folder)], capsys)
    assert rc == 0
    assert "holds 64 finished trials of study 'small' (the summary counts 48)" in err
    assert "showing the front of journal.log instead" in err
    assert "journal.log)" in out
    rc, out, err = run(["report", str(folder)], capsys)
    assert rc == 0 and "holds 64 finished trials" in err
    # a damaged line in the newer journal is named too
    trial_middle(folder / "journal.log")
    rc, out, err = run(["show", str(folder)], capsys)
    assert rc == 0 and re.search(r"journal\.log:\d+: record unreadable", err), err
