"""The chaos checker can fail: tables that break the guarantee on purpose are reported as
duplicates, losses and wrong rows (no Spark: the tables are written with delta-rs)."""

from __future__ import annotations

import os
import random
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from tests.chaos.oracle import check_jdbc, check_tables
from tests.chaos.world import OPTIONAL, World

pytestmark = pytest.mark.chaos


def _table(uri: str, rows: list[tuple[str, int, str]]) -> None:
    data = pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.string()),
            "n": pa.array([r[1] for r in rows], pa.int32()),
            "part": pa.array([r[2] for r in rows], pa.string()),
        }
    )
    write_deltalake(uri, data, mode="append")


@pytest.fixture
def world(tmp_path: Any) -> World:
    w = World(str(tmp_path / "landing"), random.Random(7))
    w.land(str(tmp_path / "landing" / "off"), 3)
    w.land(str(tmp_path / "landing" / "off"), 2)
    return w


def _all_rows(world: World) -> list[tuple[str, int, str]]:
    return [r for s in world.paths.values() if s.exists for r in s.versions[-1].rows]


def test_the_exact_table_passes(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    _table(table, _all_rows(world))
    verdict = check_tables(world, table, None)
    assert verdict.clean, verdict
    assert verdict.rows == 5


def test_a_row_twice_is_a_duplicate(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    rows = _all_rows(world)
    _table(table, [*rows, rows[0]])
    verdict = check_tables(world, table, None)
    assert verdict.duplicates and not verdict.losses


def test_a_whole_file_twice_is_a_duplicate(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    first = next(iter(world.paths.values())).versions[0].rows
    _table(table, [*_all_rows(world), *first])
    assert check_tables(world, table, None).duplicates


def test_a_missing_file_is_a_loss(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    first = next(iter(world.paths.values())).versions[0].rows
    _table(table, [r for r in _all_rows(world) if r not in first])
    verdict = check_tables(world, table, None)
    assert verdict.losses and not verdict.duplicates


def test_part_of_a_file_is_a_loss(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    _table(table, _all_rows(world)[1:])
    assert check_tables(world, table, None).losses


def test_a_changed_value_and_an_unknown_row_are_wrong_rows(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    rows = _all_rows(world)
    rid, n, part = rows[0]
    _table(table, [(rid, n + 1, part), *rows[1:], ("nobody-wrote-this", 1, "a")])
    assert len(check_tables(world, table, None).wrong) == 2


def test_two_versions_of_a_rewritten_file_are_a_duplicate(world: World, tmp_path: Any) -> None:
    table = str(tmp_path / "t")
    state = next(iter(world.paths.values()))
    world.rewrite(state)
    while not state.versions[-1].rows:
        world.rewrite(state)
    both = [*state.versions[0].rows, *state.versions[-1].rows]
    others = [r for s in world.paths.values() if s is not state for r in s.versions[-1].rows]
    _table(table, both + others)
    assert check_tables(world, table, None).duplicates
    # Either version alone is fine: one loaded before the rewrite in place stays.
    other = str(tmp_path / "t2")
    _table(other, [*state.versions[0].rows, *others])
    assert check_tables(world, other, None).clean


def test_a_moved_file_loads_again_and_its_old_path_may_stay(world: World, tmp_path: Any) -> None:
    state = next(iter(world.paths.values()))
    moved = world.move(state)
    rows = [r for s in world.paths.values() if s.exists for r in s.versions[-1].rows]
    once, twice = str(tmp_path / "once"), str(tmp_path / "twice")
    _table(once, rows)
    _table(twice, [*rows, *moved.versions[0].rows])
    assert check_tables(world, once, None).clean
    assert check_tables(world, twice, None).clean  # the old path loaded before the move
    thrice = str(tmp_path / "thrice")
    _table(thrice, [*rows, *moved.versions[0].rows, *moved.versions[0].rows])
    assert check_tables(world, thrice, None).duplicates


def test_a_late_file_may_be_absent_but_a_due_one_may_not(world: World, tmp_path: Any) -> None:
    late = world.land(os.path.join(world.root, "off"), 2, expect=OPTIONAL)
    table = str(tmp_path / "t")
    _table(table, [r for r in _all_rows(world) if r not in late.versions[0].rows])
    assert check_tables(world, table, None).clean


def test_the_jdbc_check_finds_extra_and_missing_rows(tmp_path: Any) -> None:
    table = str(tmp_path / "j")
    source = [("j1", 1, "a"), ("j2", 2, "b"), ("j3", 3, "c")]
    _table(table, [source[0], source[0], source[1]])
    verdict = check_tables(World(str(tmp_path), random.Random(1)), str(tmp_path / "none"), None)
    check_jdbc(source, table, verdict)
    assert len(verdict.duplicates) == 1 and len(verdict.losses) == 1


def test_chaos_checker_finds_two_versions_of_a_path_with_fifteen_versions(tmp_path: Any) -> None:
    """A component with more versions than the search takes: the first version's rows beside
    the last's are two versions of one path (the checker used to search only the newest 14
    versions and call the rest clean)."""
    world = World(str(tmp_path / "landing"), random.Random(7))
    state = world.land(str(tmp_path / "landing" / "off"), 3)
    for _ in range(14):
        world.rewrite(state)
    while not state.versions[-1].rows:
        world.rewrite(state)
    assert len(state.versions) >= 15
    t = str(tmp_path / "t")
    _table(t, [*state.versions[0].rows, *state.versions[-1].rows])
    assert check_tables(world, t, None).duplicates


def _keyed_table(uri: str, rows: list[tuple[Any, str, int, str]]) -> None:
    data = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "id": pa.array([r[1] for r in rows], pa.string()),
            "n": pa.array([r[2] for r in rows], pa.int32()),
            "part": pa.array([r[3] for r in rows], pa.string()),
        }
    )
    write_deltalake(uri, data, mode="append")


def test_the_jdbc_check_holds_each_batch_to_its_rows_at_the_freeze(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each committed JDBC batch must hold its range's rows as they were when it was frozen:
    a row updated in a committed range afterwards keeps its committed form; the new form, a
    second copy, a NULL-key row, a row outside every range, overlapping ranges and a gap are
    each reported. (Before, the JDBC check compared the table with the source as it is at the
    end, so a change to a committed range read as a loss and a wrong row.)"""
    from tests.chaos import oracle
    from tests.chaos.oracle import Committed, Verdict, check_jdbc_batches

    before = [(1, "a", 1, "x"), (2, "b", 2, "x"), (3, "c", 3, "x")]
    after = [(1, "a", 99, "x"), (2, "b", 2, "x"), (3, "c", 3, "x"), (None, "z", 0, "x")]
    history = {1.0: before, 2.0: after}

    def at(moment: float) -> list[tuple[Any, ...]]:
        return history[max(t for t in history if t <= moment)]

    batches = [Committed("o-1", 0, None, 2, False, 1.5), Committed("o-2", 0, 2, 3, False, 1.5)]
    monkeypatch.setattr(oracle, "committed_batches", lambda table, pid: batches)

    def verdict_for(rows: list[tuple[Any, str, int, str]], name: str) -> Verdict:
        uri = str(tmp_path / name)
        _keyed_table(uri, rows)
        v = Verdict()
        check_jdbc_batches(at, after, uri, "p", "k", v, offsets=True)
        return v

    assert verdict_for(before, "committed").clean  # the committed form, not the source's now
    assert verdict_for([after[0], *before[1:]], "new_form").wrong
    assert verdict_for([*before, before[2]], "twice").duplicates
    assert verdict_for(before[1:], "missing").losses
    assert verdict_for([*before, (None, "z", 0, "x")], "null_key").wrong
    assert verdict_for([*before, (7, "q", 0, "x")], "outside").wrong
    batches[1] = Committed("o-2", 0, 1, 3, False, 1.5)  # overlaps (None, 2]
    assert verdict_for(before, "overlap").duplicates
    batches[1] = Committed("o-2", 0, 2, 2, False, 1.5)  # the frontier stops short of key 3
    assert verdict_for(before[:2], "short").losses


def test_foreign_rows_are_checked_against_what_the_other_writer_did(world: World, tmp_path: Any) -> None:
    """Rows Delta Spark wrote (tests/chaos/spark_writer.py) are not batches: each live one is
    there once with its last value; the checker reports a copy, a deleted one back, a lost
    one, a stale value and one nobody wrote, and passes the exact table."""
    from tests.chaos.spark_writer import ForeignRows

    foreign = ForeignRows()
    foreign.live = {"f1r0": ("f1r0", 5, "a"), "f1r1": ("f1r1", 6, "b c")}
    foreign.ever = {"f1r0", "f1r1", "f1r2"}  # f1r2 was deleted
    rows = _all_rows(world)
    cases = {
        "exact": ([*foreign.live.values()], "clean"),
        "copy": ([*foreign.live.values(), ("f1r0", 5, "a")], "duplicates"),
        "deleted back": ([*foreign.live.values(), ("f1r2", 1, "a")], "wrong"),
        "lost": ([("f1r0", 5, "a")], "losses"),
        "stale value": ([("f1r0", 4, "a"), ("f1r1", 6, "b c")], "losses"),
        "never written": ([*foreign.live.values(), ("f9r9", 1, "a")], "wrong"),
    }
    for name, (extra, expect) in cases.items():
        table = str(tmp_path / name.replace(" ", "_"))
        _table(table, [*rows, *extra])
        verdict = check_tables(world, table, None, foreign=foreign)
        if expect == "clean":
            assert verdict.clean and verdict.rows == len(rows) + 2, (name, verdict)
        else:
            assert getattr(verdict, expect), (name, verdict)
    # Without the model, a foreign row is a row no source file wrote.
    assert check_tables(world, str(tmp_path / "exact"), None).wrong


@pytest.mark.objectstore
def test_the_checker_reads_a_table_on_s3_with_both_readers(
    s3_server: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the tables on S3 (``--store s3``) the checker reads them from the store: delta-rs
    and the second reader, which replays the log through the table's storage, agree on a
    table partitioned by values Spark escapes; an exact table passes and a row twice is a
    duplicate."""
    from tests.chaos.store import STORE_ENV, exists, rows_by_log, store_env, table_uri
    from tests.chaos.world import COLUMNS, PARTS

    monkeypatch.setenv(STORE_ENV, store_env(s3_server, run=f"checker-{os.getpid()}"))
    w = World(str(tmp_path / "landing"), random.Random(7), PARTS)
    for n in (6, 5):
        w.land(str(tmp_path / "landing" / "off"), n)
    rows = _all_rows(w)
    assert len({r[2] for r in rows}) > 2  # several partitions, escaped ones among them
    exact, twice = table_uri(str(tmp_path), "exact"), table_uri(str(tmp_path), "twice")
    assert exact.startswith(f"s3://{s3_server.bucket}/")
    for uri, data in ((exact, rows), (twice, [*rows, rows[0]])):
        table = pa.table(
            {
                "id": pa.array([r[0] for r in data], pa.string()),
                "n": pa.array([r[1] for r in data], pa.int32()),
                "part": pa.array([r[2] for r in data], pa.string()),
            }
        )
        write_deltalake(uri, table, partition_by=["part"], storage_options=s3_server.options())
        assert exists(uri)
    assert sorted(rows_by_log(exact, COLUMNS)) == sorted(rows)
    verdict = check_tables(w, exact, None)
    assert verdict.clean and verdict.rows == 11, verdict
    broken = check_tables(w, twice, None)
    assert broken.duplicates and not broken.wrong, broken


def test_a_chunk_whose_trials_counted_a_failure_fails_even_if_hypothesis_raised_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Kafka smoke run (``--pipeline kafka --trials 10 --seed 100``) counted 2 unclear
    errors and said ``seed 100: 13 trial(s), ok``, naming no failing seed: the chunk's
    verdict came from Hypothesis alone. The counters decide too now."""
    from tests.chaos import run
    from tests.chaos.report import REPORT

    def chunk_that_counts_a_loss(*_: Any, **__: Any) -> None:
        REPORT.losses += 1

    monkeypatch.setattr(run, "run_chunk", chunk_that_counts_a_loss)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    run._chunks(None, 2, 41, 1, 4, False, lines.append)
    assert REPORT.failing_seeds == ["41 (replay: --seed 41 --trials 1)", "42 (replay: --seed 42 --trials 1)"]
    assert any("seed 41 FAILED" in line and "counted 1 failure" in line for line in lines), lines
    REPORT.__init__()  # type: ignore[misc]
