"""The chaos tier: generated histories of loads, input changes, backfills, restatements,
zombies, SIGKILLs and another writer's maintenance, each checked row by row at the end
(tests/chaos/, docs/testing.md).

CI runs a few trials; ``EOD_CHAOS_TRIALS`` raises the count, ``EOD_CHAOS_SEED`` picks the
histories, ``EOD_CHAOS_SHRINK=1`` lets Hypothesis shrink a failing one. Long runs:
``python -m benchmarks.chaos --trials 500``. With the Delta Spark jars (EOD_DELTA_SPARK_JARS), a
few trials have Delta Spark as the other writer and the delta-spark engine for some loads.
"""

from __future__ import annotations

import os
import random
import shutil
from typing import Any

import pytest

from tests.chaos.machine import SPARK
from tests.chaos.report import REPORT
from tests.chaos.run import run_trials

pytestmark = [pytest.mark.chaos, pytest.mark.spark, pytest.mark.faults, pytest.mark.slow]


@pytest.fixture
def chaos_postgres(request: pytest.FixtureRequest) -> Any:
    """The session's PostgreSQL server for the JDBC pipeline, or ``None`` where there is none
    (CI requires one, so there the JDBC pipeline always runs)."""
    try:
        return request.getfixturevalue("postgres")
    except pytest.skip.Exception:
        return None


def test_generated_histories_load_every_row_exactly_once(
    spark: Any, chaos_postgres: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trials = int(os.environ.get("EOD_CHAOS_TRIALS", "6"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "20261124"))
    # Half of CI's trials get a SIGKILL (a JVM each); long runs set their own share.
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    # One SIGKILL per armed trial here (CI's time); the kill share has a test of its own below.
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    # The machine arms and disarms EOD_FAULTPOINTS itself, step by step and from its worker
    # threads (tests/chaos/machine.py; benchmarks/chaos.py runs it outside pytest too), so it
    # sets os.environ directly; registering the variable here undoes whatever it left.
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark,
        trials=trials,
        base_seed=base_seed,
        per_chunk=trials,
        steps=12,
        shrink=os.environ.get("EOD_CHAOS_SHRINK") == "1",
        say=lines.append,
    )
    with capsys.disabled():
        print()
        print("\n".join(lines + report.lines()))
    assert report.trials >= trials
    assert sum(report.outcomes.values()) > 0, "the trials loaded nothing: the harness is broken"
    assert report.failures == 0 and not report.failing_seeds, "\n".join(lines + report.lines())


def test_jdbc_rows_changed_below_the_frontier_are_modelled_exactly(
    spark: Any, postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JDBC rules, driven by hand: committed ranges changed afterwards (UPDATE, DELETE,
    DELETE and re-INSERT under the same key) keep their committed rows; NULL-key rows are never
    loaded and are counted on the result; a row of a frozen batch updated before the retry
    fails the retry with InputChangedError and the drain re-freezes it; a mid-day manual run
    over a committed day of the JDBC interval pipeline is refused. The checker passes the
    tables, and reports a row another writer appended twice. (Before this the harness had
    no such rules; on 013035f the update before the retry was committed silently.)"""
    from deltalake import DeltaTable, write_deltalake

    from airflow_eod.core.errors import InputChangedError
    from tests.chaos.jdbc_world import keyed
    from tests.chaos.machine import OVERLAP_ERROR, ChaosMachine
    from tests.chaos.oracle import Verdict, check_jdbc_batches

    monkeypatch.setitem(SPARK, "session", spark)
    monkeypatch.setitem(SPARK, "postgres", postgres)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    m = ChaosMachine()
    m.setup(seed=18)
    m.kill_budget = 0
    m.jdbc_batch = None  # one batch takes every new row: the updated row is in the frozen range
    r = random.Random(18)
    try:
        m._insert(r, 4)
        assert m.dag_run(m.new_run(m.pipes["jdbc"])) is None
        hist = m.jdbc_hist
        rows = sorted(keyed(hist.now()))
        hist.update(rows[0], r)
        hist.delete(rows[1])
        hist.reinsert(rows[2], r)
        hist.insert([None, None], r)
        # A batch frozen by a try that died, one of its rows updated (the count kept).
        m._insert(r, 2)
        run = m.new_run(m.pipes["jdbc"])
        m.attempt(run, "after_plan=raise")
        fresh = [row for row in keyed(hist.now()) if row[0] > 4]
        hist.update(fresh[0], r)
        assert isinstance(m.dag_run(run), InputChangedError)
        # The interval pipeline: a day, then a manual run at noon over it and the day before.
        m._insert_ts(r, 4, 1)
        assert m.dag_run(m.new_run(m.pipes["jdbci"], m.interval_for(1, "daily"))) is None
        midday = m.dag_run(m.new_run(m.pipes["jdbci"], m.interval_for(0, "midday", 12)))
        assert OVERLAP_ERROR is not None and isinstance(midday, OVERLAP_ERROR)
        assert not m.drain()
        verdict = Verdict()
        for name in ("jdbc", "jdbci"):
            pipe = m.pipes[name]
            h = m.hist(pipe)
            check_jdbc_batches(
                h.at, h.now(), m.target(pipe), pipe.pipeline_id, h.key, verdict, offsets=name == "jdbc"
            )
        assert verdict.clean and verdict.rows > 0, verdict
        assert not m.problems, m.problems
        assert REPORT.refusals["overlapping_interval"] >= 1
        assert REPORT.events["refreeze_by_runbook"] >= 1
        assert REPORT.events["null_key_rows_checked"] >= 1
        # The checker can fail: another writer appends a copy of a committed row.
        copy = DeltaTable(m.jdbc_table).to_pyarrow_table().slice(0, 1)
        write_deltalake(m.jdbc_table, copy, mode="append")
        broken = Verdict()
        h = m.jdbc_hist
        check_jdbc_batches(h.at, h.now(), m.jdbc_table, "chaos.jdbc", "k", broken)
        assert broken.duplicates, broken
    finally:
        postgres.execute(f"DROP TABLE IF EXISTS {m.jdbc_name}")
        postgres.execute(f"DROP TABLE IF EXISTS {m.jdbc_name}_ts")
        shutil.rmtree(m.tmp, ignore_errors=True)


def test_sigkills_land_in_at_least_a_tenth_of_the_load_attempts(
    spark: Any, chaos_postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With every trial armed (EOD_CHAOS_KILL_PERCENT=100), at least 10% of the load attempts
    end in a SIGKILL of the try, in trials of either retention. (Before: kills went only to
    trials with the default retention, at most one per trial, often at points the try never
    reached: seed 77001, 36 trials, --kill-percent 70 landed 4 kills in 620 attempts.)"""
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", "100")
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(spark, trials=2, base_seed=18_005, per_chunk=2, steps=8, say=lines.append)
    text = "\n".join(lines + report.lines())
    assert report.failures == 0 and not report.failing_seeds, text
    assert sum(report.kills.values()) >= 2, text
    assert report.kill_share >= 10.0, text


@pytest.mark.objectstore
# CI runs the landing files on S3 too; a local landing into the S3 table is `extended`.
@pytest.mark.parametrize(
    "landing",
    [pytest.param("local", marks=pytest.mark.extended), "s3"],
    ids=["landing-local", "landing-s3"],
)
def test_generated_histories_on_s3_load_every_row_exactly_once(
    spark: Any,
    s3_server: Any,
    chaos_postgres: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    landing: str,
) -> None:
    """The chaos tier with every trial's tables (and their plan logs) on S3 (SeaweedFS):
    the loads write through s3a and commit with the store's conditional put, in this process
    and in SIGKILLed children, and the checker reads the tables back from the store. Left out
    on S3 (tests/chaos/store.py): the delta-spark engine, Delta Spark as the other writer, the
    quarantine and malformed records. With ``landing-s3`` the landing files are on S3 too,
    planned from the store's listing and read over s3a. Longer runs:
    ``python -m benchmarks.chaos --store s3 [--landing-store s3]``."""
    from tests.chaos.store import STORE_ENV, store_env
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()  # the session fixture put them on its class path where they are cached
    if why is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(why)
        pytest.skip(why)
    trials = int(os.environ.get("EOD_CHAOS_S3_TRIALS", "2"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "21042"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    # The store's options for this process and the children it starts (a test-only variable).
    run = f"chaos-tier-{landing}-{os.getpid()}"
    monkeypatch.setenv(STORE_ENV, store_env(s3_server, run=run, landing=landing == "s3"))
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=8, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    assert report.outcomes["committed"] > 0, text
    # Every trial's main table was there, on S3, when the checker read it.
    assert report.events["main_table_on_s3"] == report.trials, text
    # The landing pipelines planned and read the prefix on S3 (or never did, landing local).
    assert (report.events["landing_source_on_s3"] > 0) == (landing == "s3"), text


@pytest.mark.yarn
def test_generated_histories_on_hdfs_load_every_row_exactly_once(
    spark: Any,
    mini_yarn: Any,
    chaos_postgres: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chaos tier with every trial's tables (and their plan logs) on HDFS (the mini
    cluster's): the loads write through Spark's HDFS client and commit with the NameNode's
    rename without overwrite, in this process and in SIGKILLed children, and the checker reads
    the tables back from HDFS. Left out as on S3: the delta-spark engine, Delta Spark as the
    other writer, the quarantine. Longer runs: ``python -m benchmarks.chaos --store hdfs``."""
    from tests.chaos.store import STORE_ENV, hdfs_env

    trials = int(os.environ.get("EOD_CHAOS_HDFS_TRIALS", "1"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "24024"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "100"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setenv(STORE_ENV, hdfs_env(mini_yarn, run=f"chaos-tier-hdfs-{os.getpid()}"))
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=8, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    assert report.outcomes["committed"] > 0, text
    # Every trial's main table was there, on HDFS, when the checker read it.
    assert report.events["main_table_on_s3"] == report.trials, text


@pytest.mark.delta_spark
def test_delta_spark_as_the_other_writer_and_as_the_engine(
    spark: Any, chaos_postgres: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated histories with Delta Spark's statements between and during the loads
    (appends, OPTIMIZE and ZORDER, VACUUM, DELETE/UPDATE/MERGE, checkpoints, ADD COLUMNS,
    properties) and the delta-spark engine for a coin's share of the pipelines that can use
    it: every batch once, every foreign row as Delta Spark left it, verify clean. Longer runs:
    ``python -m benchmarks.chaos --delta-spark-writer --engine mixed``."""
    trials = int(os.environ.get("EOD_CHAOS_DELTA_SPARK_TRIALS", "3"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "19190"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    monkeypatch.setitem(SPARK, "delta_spark", True)
    monkeypatch.setitem(SPARK, "engine", "mixed")
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=10, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    # The run did what it says: Delta Spark wrote, and the delta-spark engine committed.
    spark_ops = {k: v for k, v in report.faults.items() if k.startswith("spark_")}
    assert sum(spark_ops.values()) >= trials, text
    assert report.events["committed_by_delta-spark"] > 0, text


def test_generated_merge_histories_keep_the_newest_row_per_key(
    spark: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge pipeline (tests/chaos/merge_machine.py): change files (inserts, updates and
    deletes of keys seen before, stale changes, several changes of a key in one file) merged
    by an offset and an interval pipeline into one table under the harness's faults (raises
    at every point, SIGKILLs, zombies, racing runs and pipelines, backfills newest first and
    in parallel, restatements, another writer's maintenance), each trial checked against the
    source's newest row per key over the batches the table says are committed. CI runs a
    few; ``EOD_CHAOS_MERGE_TRIALS`` raises it; long runs:
    ``python -m benchmarks.chaos --pipeline merge --trials 200``."""
    trials = int(os.environ.get("EOD_CHAOS_MERGE_TRIALS", "2"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "22022"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setitem(SPARK, "pipeline", "merge")
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=8, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    # The trials merged, and the checker looked at rows.
    assert report.events["merge_trial"] == report.trials, text
    assert report.outcomes["committed"] > 0 and report.events["merge_rows_checked"] > 0, text


def test_the_merge_checker_passes_a_merged_table_and_reports_each_break(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driven by hand: an offset batch (a key changed twice in one file), two days backfilled
    newest first (the older day carries a stale update), a late file loaded by restating its
    day. The table holds each key's newest change, a delete as its tombstone, and the checker
    passes it. Then the table is broken four ways and each is reported: a key's row twice
    (duplicate), a key gone (loss), a key set back to an older change of its own (regressed,
    a wrong row), a value changed (wrong)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from tests.chaos.machine import _interval_key
    from tests.chaos.merge_machine import MergeChaosMachine
    from tests.chaos.merge_oracle import check_merge_table
    from tests.chaos.merge_world import MERGE_COLUMNS
    from tests.chaos.world import OPTIONAL, REQUIRED

    monkeypatch.setitem(SPARK, "session", spark)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    m = MergeChaosMachine()
    m.setup(seed=22)
    m.kill_budget = 0
    w = m.mworld
    pipes = [p.pipeline_id for p in m.pipes.values()]
    day = {d: m.day_dir(m.pipes["mint"], m.interval_for(d, "daily")[0]) for d in (1, 3)}
    try:
        inserts = [w.change(k, op="I", stale=False) for k in (1, 2, 3, 4)]
        twice = w.change(1, op="U", stale=False)
        w.land_changes(m.pipes["moff"].root, [*inserts, twice])
        assert m.dag_run(m.new_run(m.pipes["moff"])) is None
        newest_2, delete_3 = w.change(2, op="U", stale=False), w.change(3, op="D", stale=False)
        w.land_changes(day[3], [newest_2, delete_3])
        stale_2, update_4 = w.change(2, op="U", stale=True), w.change(4, op="U", stale=False)
        w.land_changes(day[1], [stale_2, update_4])
        runs = {d: m.new_run(m.pipes["mint"], m.interval_for(d, "daily")) for d in (3, 1)}
        for d in (3, 1):  # newest first
            assert m.dag_run(runs[d]) is None
        late_4 = w.change(4, op="U", stale=False)
        w.land_changes(day[1], [late_4], expect=OPTIONAL)
        restate = m.new_run(m.pipes["mint"], runs[1].interval, restate=True, key=_interval_key(runs[1]))
        assert m.dag_run(restate) is None
        for s in w.files_in(day[1]):
            s.expect = REQUIRED
        assert not m.drain()
        read = DeltaTable(m.table).to_pyarrow_table().to_pylist()
        held = {r["id"]: tuple(r[c] for c in MERGE_COLUMNS) for r in read}
        assert held == {1: twice, 2: newest_2, 3: delete_3, 4: late_4}, held
        assert stale_2[3] < newest_2[3]
        good = check_merge_table(w, m.table, pipes)
        assert good.clean and good.rows == 4, good

        schema = DeltaTable(m.table).to_pyarrow_table().schema

        def another_writer_appends(change: tuple[Any, ...]) -> None:
            row = dict(zip(MERGE_COLUMNS, change, strict=True))
            write_deltalake(m.table, pa.Table.from_pylist([row], schema=schema), mode="append")

        another_writer_appends(twice)
        dup = check_merge_table(w, m.table, pipes)
        assert any("key 1 has 2 rows" in d for d in dup.duplicates) and not dup.losses, dup
        DeltaTable(m.table).delete("id = 1")
        lost = check_merge_table(w, m.table, pipes)
        assert any("key 1 is missing" in x for x in lost.losses) and not lost.duplicates, lost
        DeltaTable(m.table).delete("id = 2")
        another_writer_appends(inserts[1])
        back = check_merge_table(w, m.table, pipes)
        assert any("key 2 regressed" in x for x in back.wrong), back
        DeltaTable(m.table).update(predicate="id = 4", updates={"amount": "amount + 1"})
        changed = check_merge_table(w, m.table, pipes)
        assert any("(4," in x and "differs" in x for x in changed.wrong), changed
    finally:
        shutil.rmtree(m.tmp, ignore_errors=True)


@pytest.mark.objectstore
def test_generated_merge_histories_on_s3_keep_the_newest_row_per_key(
    spark: Any, s3_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge pipeline with the merge table (and its plan log) on S3 (SeaweedFS): every
    merge reads the files it rewrites over s3a and commits with the store's conditional put,
    in this process and in SIGKILLed children; the landing files stay local. Longer runs:
    ``python -m benchmarks.chaos --pipeline merge --store s3``."""
    from tests.chaos.store import STORE_ENV, store_env
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(why)
        pytest.skip(why)
    trials = int(os.environ.get("EOD_CHAOS_S3_TRIALS", "1"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "22042"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setenv(STORE_ENV, store_env(s3_server, run=f"chaos-merge-tier-{os.getpid()}"))
    monkeypatch.setitem(SPARK, "pipeline", "merge")
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=8, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    assert report.outcomes["committed"] > 0, text
    assert report.events["main_table_on_s3"] == report.trials, text


@pytest.mark.kafka
def test_generated_kafka_histories_load_every_committed_record_once(
    spark: Any, kafka_broker: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kafka pipeline (tests/chaos/kafka_machine.py): records produced to several
    partitions of a fresh topic per trial, idempotently and in transactions that commit or
    abort (one left open while a load runs), partitions added mid-history, batches sometimes
    capped, loaded under the harness's faults (raises at every point, SIGKILLs, zombies,
    racing runs, restatements, another writer's maintenance); each trial's table checked row
    by row against every committed record, as the broker holds them. CI runs a few;
    ``EOD_CHAOS_KAFKA_TRIALS`` raises it; long runs:
    ``python -m benchmarks.chaos --pipeline kafka --trials 200``."""
    trials = int(os.environ.get("EOD_CHAOS_KAFKA_TRIALS", "2"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "23023"))
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setenv("EOD_CHAOS_MAX_KILLS", os.environ.get("EOD_CHAOS_MAX_KILLS", "1"))
    monkeypatch.setitem(SPARK, "pipeline", "kafka")
    monkeypatch.setitem(SPARK, "kafka", kafka_broker)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark, trials=trials, base_seed=base_seed, per_chunk=trials, steps=6, say=lines.append
    )
    text = "\n".join(lines + report.lines())
    with capsys.disabled():
        print()
        print(text)
    assert report.trials >= trials
    assert report.failures == 0 and not report.failing_seeds, text
    # The trials loaded records, and the checker looked at rows.
    assert report.events["kafka_trial"] == report.trials, text
    assert report.outcomes["committed"] > 0 and report.events["kafka_rows_checked"] > 0, text


@pytest.mark.kafka
def test_the_kafka_checker_passes_a_loaded_table_and_reports_each_break(
    spark: Any, kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Driven by hand: records produced idempotently, a committed and an aborted
    transaction, a load while a transaction is open (it stops at the last stable offset),
    the transaction committed, a partition added, a capped catch-up in the drain. The table
    holds every committed record once and no aborted one, and the checker passes it. Then
    the table is broken three ways and each is reported: a record's row twice (duplicate), a
    record gone (loss), an aborted record's row (wrong)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from tests.chaos.kafka_machine import KafkaChaosMachine
    from tests.chaos.kafka_oracle import check_kafka_table
    from tests.chaos.kafka_world import ABORTED, table_rows

    monkeypatch.setitem(SPARK, "session", spark)
    monkeypatch.setitem(SPARK, "kafka", kafka_broker)
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    m = KafkaChaosMachine()
    m.setup(seed=23)
    m.kill_budget = 0
    m.cap = 8  # the drain's catch-up takes two batches
    m.config, m.short = {}, False  # the default retention: no try refused as too old here
    w = m.kworld
    try:
        w.produce(5)
        w.transaction(3, abort=False)
        w.transaction(2, abort=True)
        w.open_transaction(2)
        assert m.dag_run(m.new_run(m.pipes["kafka"])) is None
        loaded = len(DeltaTable(m.table).to_pyarrow_table())
        assert 0 < loaded <= 8
        w.end_transaction(abort=False)
        w.add_partitions(1)
        w.produce(4, partition=w.partitions - 1)  # the new partition
        assert not m.drain()
        verdict, broker = check_kafka_table(w, m.table)
        assert not broker, broker
        assert verdict.clean and verdict.rows == len(w.committed()) == 14, verdict
        assert any(p == w.partitions - 1 for _, p, _, _ in table_rows(m.table))

        schema = DeltaTable(m.table).to_pyarrow_table().schema
        first = DeltaTable(m.table).to_pyarrow_table().slice(0, 1)
        write_deltalake(m.table, first, mode="append")
        dup = check_kafka_table(w, m.table)[0]
        assert len(dup.duplicates) == 1 and not dup.losses and not dup.wrong, dup
        offset = first.column("kafka_offset")[0].as_py()
        part = first.column("kafka_partition")[0].as_py()
        DeltaTable(m.table).delete(f"kafka_partition = {part} AND kafka_offset = {offset}")
        lost = check_kafka_table(w, m.table)[0]
        assert len(lost.losses) == 1 and not lost.duplicates and not lost.wrong, lost
        (p, o), (value, _) = next((k, v) for k, v in w.fate.items() if v[1] == ABORTED)
        row = {**first.to_pylist()[0], "kafka_partition": p, "kafka_offset": o, "value": value}
        write_deltalake(m.table, pa.Table.from_pylist([row], schema=schema), mode="append")
        wrong = check_kafka_table(w, m.table)[0]
        assert len(wrong.wrong) == 1 and "never committed" in wrong.wrong[0], wrong
    finally:
        w.close()
        shutil.rmtree(m.tmp, ignore_errors=True)
