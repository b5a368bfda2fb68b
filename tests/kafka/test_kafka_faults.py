"""Kafka loads under crashes and races: child drivers killed at each boundary of the write
path and in the middle of Spark's read, racing attempts and planners, a catch-up run that
dies between batches. Each case ends with the checker comparing the table with what Kafka
holds, row by row, and counts the table's commits: one per batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.catch_up import batch_token
from airflow_eod.core.faults import JOB_POINTS, InjectedFault
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.table_layout import attempt_dir, batch_dir
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources import KafkaSource
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSpec
from tests.support.helpers import lost_races, run_child
from tests.support.kafka_helpers import (
    check_exactly_once,
    ctx_for,
    kafka_records,
    kafka_source,
    kafka_spec,
    plan_kafka,
    records,
    topic_name,
)
from tests.support.rendezvous import arrivals
from tests.support.spark_conf import KAFKA_JARS_ENV

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.faults]

# The line Kafka's Java client logs when Spark's task opens its consumer (the driver plans
# with an admin client): the read of the batch has begun.
CONSUMER_OPENED = "ConsumerConfig values"
_LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d %p %c: %m%n
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
logger.consumer.name = org.apache.kafka.clients.consumer.ConsumerConfig
logger.consumer.level = info
"""


def _child(
    spec: LoadSpec, tmp: Any, faults: str = "", name: str = "child", log_consumer: bool = False
) -> subprocess.Popen[bytes]:
    """The spark-submit entrypoint in a child process with Spark's Kafka connector; with
    ``log_consumer``, its JVM logs when a task opens its Kafka consumer."""
    env = {"PYSPARK_SUBMIT_ARGS": f"--jars {os.environ[KAFKA_JARS_ENV]} pyspark-shell"}
    if log_consumer:
        conf = os.path.join(str(tmp), "log4j2.properties")
        with open(conf, "w") as fh:
            fh.write(_LOG4J2)
        env["LOG4J_CONFIGURATION_FILE"] = conf
    return run_child(spec, str(tmp), faults, name, env)


def _commits(table: str) -> int:
    return len(DeltaTable(table).history())


def _first_plan(
    spark: Any, broker: Any, table: str, n: int, partitions: int, **kw: Any
) -> tuple[str, Any, Plan]:
    """A fresh topic of ``n`` records and the plan of its first batch."""
    topic = topic_name()
    broker.create_topic(topic, partitions)
    broker.produce(topic, records(n, partitions))
    source = kafka_source(broker, topic, **kw)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    return topic, source, plan


# Where the process dies, and how: a kill in a child driver where the dead attempt leaves
# something behind (staged files; a commit without its durable record), an exception in
# this process elsewhere (before anything is read; staged files kept, as after_stage's kill
# and the mid-stage kill below show a dead process leaves them; after the commit and its
# record), which spares a JVM start-up each.
BOUNDARIES = [
    ("before_write", "raise"),
    ("after_stage", "kill"),
    ("before_commit", "raise"),
    ("before_record", "kill"),
    ("after_commit", "raise"),
]
assert {p for p, _ in BOUNDARIES} == set(JOB_POINTS), "a job fault point has no case here"


@pytest.mark.parametrize(("point", "how"), BOUNDARIES)
def test_a_crash_at_each_boundary_then_the_retry_commits_the_batch_once(
    spark: Any,
    kafka_broker: Any,
    table: str,
    tmp_path: Any,
    point: str,
    how: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, source, first = _first_plan(spark, kafka_broker, table, 20, 2)
    assert run_load(spark, kafka_spec(source, table, first)).outcome == "committed"
    # The second batch (a commit onto an existing table) dies.
    kafka_broker.produce(topic, records(16, 2, start=20))
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx, run="run-2")
    assert plan is not None
    if how == "kill":
        child = _child(kafka_spec(source, table, plan), tmp_path, f"{point}=kill@1")
        out = child.communicate(timeout=300)[0].decode()
        assert child.returncode == -signal.SIGKILL, out[-2000:]
    else:
        monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
        with pytest.raises(InjectedFault):
            run_load(spark, kafka_spec(source, table, plan))
        monkeypatch.delenv("EOD_FAULTPOINTS")
    # Past the Delta commit (before its durable record, or after it), the batch is in.
    committed = ask(TableRef.parse(table), plan.key).committed
    assert committed == (point in ("before_record", "after_commit")), point
    assert _commits(table) == 1 + committed
    # Records that arrive before the retry wait for the next batch: the retry replans the
    # same frozen ranges.
    kafka_broker.produce(topic, records(6, 2, start=36))
    retry_plan = plan_kafka(source, table, ctx, run="run-2")
    assert retry_plan == plan
    result = run_load(spark, kafka_spec(source, table, retry_plan, try_number=2))
    assert result.outcome == ("already_committed" if committed else "committed")
    assert _commits(table) == 2
    check_exactly_once(table, _up_to(kafka_broker, topic, plan))
    # What the dead attempt staged is gone once the batch is committed.
    assert os.listdir(os.path.join(table, batch_dir(plan.key))) == [
        os.path.basename(attempt_dir(plan.key, 0, _winner(table, plan)))
    ]
    # And the late records are the next batch, loaded once.
    last = plan_kafka(source, table, ctx, run="run-3")
    assert last is not None and run_load(spark, kafka_spec(source, table, last)).rows == 6
    assert _commits(table) == 3
    check_exactly_once(table, kafka_records(kafka_broker, topic))


def _up_to(broker: Any, topic: str, plan: Plan) -> list[tuple[str, int, int, str | None]]:
    """What Kafka holds of ``topic`` below ``plan``'s frozen ends."""
    ends = {int(p): r[1] for p, r in plan.boundary["topics"][topic]["partitions"].items()}
    return [r for r in kafka_records(broker, topic) if r[2] < ends[r[1]]]


def _winner(table: str, plan: Plan) -> str:
    """The attempt id whose commit holds ``plan``'s batch."""
    status = ask(TableRef.parse(table), plan.key)
    assert status.manifest is not None
    return status.manifest.attempt_id


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child driver and its JVM (as a worker's death takes both), and wait for
    both to be gone: a JVM left alone would go on writing the attempt's files."""
    import psutil

    try:
        jvms = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        jvms = []
    proc.send_signal(signal.SIGKILL)
    for p in jvms:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    proc.wait(timeout=60)
    psutil.wait_procs(jvms, timeout=60)


# CI kills the child while it stages; the kill while Spark reads is `extended`.
@pytest.mark.parametrize("moment", [pytest.param("reading", marks=pytest.mark.extended), "staging"])
def test_a_child_killed_while_spark_reads_or_stages_then_the_retry_commits_once(
    spark: Any, kafka_broker: Any, table: str, tmp_path: Any, moment: str
) -> None:
    # Reading: the child's fetches are throttled by a broker quota on its client.id (unique
    # to this test), so the read is still in flight seconds after the task opened its
    # consumer, the trigger. Staging: the trigger is the attempt's directory appearing.
    client = f"eod-slow-{uuid.uuid4().hex[:8]}"
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    value = "v" * 1000
    kafka_broker.produce(topic, [(0, f"k{i}", f"{i}-{value}") for i in range(1500)])
    source = kafka_source(kafka_broker, topic, client_config={"client.id": client})
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    spec = kafka_spec(source, table, plan)
    killed_dir = os.path.join(table, attempt_dir(plan.key, 0, spec.attempt_id))
    if moment == "reading":
        kafka_broker.set_consumer_quota(client, 100_000)
    # A guard, not the trigger: a staging child that outruns the poll waits with its files
    # staged and uncommitted, so the kill never lands after a commit.
    guard = "after_stage=sleep:120" if moment == "staging" else ""
    child = _child(spec, tmp_path, guard, log_consumer=moment == "reading")
    lines: list[str] = []
    opened = threading.Event()

    def follow() -> None:
        assert child.stdout is not None
        for raw in child.stdout:
            lines.append(raw.decode(errors="replace"))
            if CONSUMER_OPENED in lines[-1]:
                opened.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and child.poll() is None:
            if opened.is_set() if moment == "reading" else os.path.isdir(killed_dir):
                break
            time.sleep(0.02)
        assert child.poll() is None, "the child ended before the kill: " + "".join(lines)[-2000:]
        staged_at_kill = os.path.isdir(killed_dir)
        _kill_tree(child)
    finally:
        if child.poll() is None:
            _kill_tree(child)
    reader.join(timeout=30)
    # Killed mid-read, nothing was staged yet; killed mid-stage, files were being written.
    assert staged_at_kill == (moment == "staging"), "".join(lines)[-2000:]
    assert not ask(TableRef.parse(table), plan.key).committed
    assert not os.path.exists(os.path.join(table, "_delta_log")), "no commit, not even the table's creation"

    # The retry runs on another worker, whose client is not throttled (the client id is not
    # part of the source's identity: it plans the same batch).
    source = replace(source, client_config={})
    retry_plan = plan_kafka(source, table, ctx_for(spark))
    assert retry_plan == plan
    retry = kafka_spec(source, table, retry_plan, try_number=2)
    result = run_load(spark, retry)
    assert result.outcome == "committed" and result.rows == 1500
    assert _commits(table) == 1
    check_exactly_once(table, kafka_records(kafka_broker, topic))
    # The table's files are the retry's; the killed attempt's files never became visible,
    # and its directory is gone.
    ours = os.path.join(table, attempt_dir(plan.key, 0, retry.attempt_id)) + "/"
    files = DeltaTable(table).file_uris()
    assert files and all(f.startswith(ours) for f in files), files
    assert not os.path.exists(killed_dir)
    assert os.listdir(os.path.join(table, batch_dir(plan.key))) == [os.path.basename(ours.rstrip("/"))]


def _racer(spec: LoadSpec, tmp: Any, name: str, rendezvous: str) -> subprocess.Popen[bytes]:
    """A child driver that, after its ask and before its commit, waits at ``rendezvous``
    until the other racer got there too (tests/support/rendezvous.py)."""
    from tests.conftest import REPO

    spec_path = os.path.join(str(tmp), f"{name}-spec.json")
    with open(spec_path, "w") as fh:
        fh.write(spec.to_json())
    args = ["--local", "--spec", spec_path, "--result", os.path.join(str(tmp), f"{name}-result.json")]
    code = (
        "import sys\n"
        "from airflow_eod.spark.driver import main\n"
        "from tests.support.rendezvous import meeting_before_commit\n"
        f"with meeting_before_commit({rendezvous!r}, {name!r}, 2):\n"
        f"    code = main({args!r})\n"
        "sys.exit(code)\n"
    )
    env = dict(
        os.environ,
        PYSPARK_SUBMIT_ARGS=f"--jars {os.environ[KAFKA_JARS_ENV]} pyspark-shell",
        EOD_FAULTPOINTS="",
        PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def test_two_child_drivers_racing_for_the_same_offsets_commit_once(
    spark: Any, kafka_broker: Any, table: str, tmp_path: Any
) -> None:
    topic, source, plan = _first_plan(spark, kafka_broker, table, 40, 2)
    # Both meet between their ask and their commit: both have asked "no" before either
    # commits (or creates the table), so fencing, not timing, picks the winner.
    rendezvous = str(tmp_path / "rendezvous")
    a = _racer(kafka_spec(source, table, plan, try_number=1), tmp_path, "a", rendezvous)
    b = _racer(kafka_spec(source, table, plan, try_number=2), tmp_path, "b", rendezvous)
    outs = [p.communicate(timeout=300)[0].decode() for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, "\n".join(o[-1500:] for o in outs)
    assert arrivals(rendezvous) == ["a", "b"]
    results = [json.loads((tmp_path / f"{n}-result.json").read_text()) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    loser = [r["outcome"] for r in results].index("already_committed")
    # The loser lost the race at its commit (it did not merely find the batch committed).
    assert lost_races(outs[loser]) >= 1 and lost_races(outs[1 - loser]) == 0, outs[loser][-3000:]
    assert len({r["table_version"] for r in results}) == 1
    assert _commits(table) == 1
    check_exactly_once(table, kafka_records(kafka_broker, topic))


def test_planners_of_two_runs_at_the_same_moment_freeze_the_same_batch(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(20, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    start = threading.Barrier(2)
    plans: dict[str, Plan | None] = {}
    failures: list[BaseException] = []

    def planner(run: str) -> None:
        try:
            start.wait(timeout=30)
            plans[run] = plan_kafka(source, table, ctx, run=run)
        except BaseException as exc:  # reported below, not lost in the thread
            failures.append(exc)

    threads = [threading.Thread(target=planner, args=(run,)) for run in ("run-a", "run-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    a, b = plans["run-a"], plans["run-b"]
    assert a is not None and b is not None
    assert a.key == b.key and a.boundary == b.boundary and a.inputs == b.inputs
    # Records that arrive before any commit do not make another run's batch bigger: the
    # newest uncommitted batch is the one every run loads first.
    kafka_broker.produce(topic, records(10, 2, start=20))
    c = plan_kafka(source, table, ctx, run="run-c")
    assert c is not None and c.key == a.key and c.boundary == a.boundary
    assert run_load(spark, kafka_spec(source, table, b)).outcome == "committed"
    assert run_load(spark, kafka_spec(source, table, a, try_number=2)).outcome == "already_committed"
    assert _commits(table) == 1
    check_exactly_once(table, _up_to(kafka_broker, topic, a))
    nxt = plan_kafka(source, table, ctx, run="run-d")
    assert nxt is not None and nxt.key != a.key
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 10
    assert _commits(table) == 2
    check_exactly_once(table, kafka_records(kafka_broker, topic))


def _catch_up(spark: Any, source: KafkaSource, table: str, run: str, try_number: int) -> list[Any]:
    """Batch after batch under the catch-up run's tokens until nothing is new, as the
    operators' catch_up does (airflow_eod/core/catch_up.py)."""
    results = []
    for index in range(100):
        plan = plan_kafka(source, table, ctx_for(spark), run=batch_token(run, index))
        if plan is None:
            return results
        results.append((plan, run_load(spark, kafka_spec(source, table, plan, try_number=try_number))))
    raise AssertionError("the catch-up did not drain the topic in 100 batches")


def _transactions(broker: Any, topic: str, partitions: int) -> None:
    """One committed and one aborted transaction, each a record per partition: the aborted
    records and both transactions' markers take offsets that hold no row."""
    producer = broker.transactional_producer(f"tx-{uuid.uuid4().hex[:8]}")
    for tag, commit in (("tx-ok", True), ("tx-aborted", False)):
        producer.begin_transaction()
        for p in range(partitions):
            producer.produce(topic, key=f"{tag}-{p}", value=f"{tag}-{p}", partition=p)
        producer.flush(30)  # in the log before the abort: the aborted records take offsets
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def test_a_catch_up_run_that_dies_between_batches_is_resumed_by_its_retry(
    spark: Any, kafka_broker: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, records(30, 3))
    _transactions(kafka_broker, topic, 3)
    kafka_broker.produce(topic, records(12, 3, start=30))
    source = kafka_source(kafka_broker, topic, max_records_per_batch=12)
    # Try 1 dies right after its third batch committed, before it plans the fourth.
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1#3")
    with pytest.raises(InjectedFault):
        _catch_up(spark, source, table, "run-1", try_number=1)
    assert _commits(table) == 3
    monkeypatch.delenv("EOD_FAULTPOINTS")
    kafka_broker.produce(topic, records(7, 3, start=42))  # more arrive before the retry
    done = _catch_up(spark, source, table, "run-1", try_number=2)
    outcomes = [r.outcome for _, r in done]
    assert outcomes[:3] == ["already_committed"] * 3 and set(outcomes[3:]) == {"committed"}
    # Each batch spans at most 12 offsets, and the batches tile every partition's offsets
    # from 0 without a gap or an overlap, markers and aborted records included.
    sizes = [sum(i["until"] - i["from"] for i in plan.inputs) for plan, _ in done]
    assert all(0 < n <= 12 for n in sizes), sizes
    frontier = dict.fromkeys(range(3), 0)
    for plan, _ in done:
        for entry in plan.inputs:
            assert entry["from"] == frontier[entry["partition"]], (plan.key, entry)
            frontier[entry["partition"]] = entry["until"]
    # 49 plain records, 3 committed in a transaction, 3 aborted, 6 markers.
    assert sum(frontier.values()) == sum(sizes) == 49 + 3 + 3 + 6
    assert len({plan.key for plan, _ in done}) == len(done)
    assert _commits(table) == len(done)
    expected = kafka_records(kafka_broker, topic)
    assert len(expected) == 52 and not any(r[3].startswith("tx-aborted") for r in expected if r[3])
    check_exactly_once(table, expected)
