"""The deferrable DeltaBatchSensor and its DeltaBatchTrigger (issue 10, item 1).

Real Delta tables, no Spark: batches are staged with pyarrow the way Spark stages them
(:func:`tests.support.helpers.stage_rows`) and committed by the real commit engine. The trigger runs
on a real event loop; the sensor runs under ``dag.test()``, which runs its trigger in line.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sensors.delta_batch import DeltaBatchSensor
from airflow_eod.triggers.delta_batch import DeltaBatchTrigger
from tests.conftest import REPO
from tests.support.helpers import load_dag_file, stage_rows, task_tries, xcom_value

pytestmark = pytest.mark.airflow

PIPE = "tests.defer"
DAG_FILE = os.path.join(REPO, "tests", "dags", "eod_sensor_deferrable.py")


def _key(day: int) -> BatchKey:
    return BatchKey.for_interval(
        PIPE, datetime(2026, 11, day, tzinfo=UTC), datetime(2026, 11, day + 1, tzinfo=UTC)
    )


def _commit(table: str, key: BatchKey, rows: list[int]) -> None:
    """Plan and commit ``key`` at generation 0 through the real commit engine."""
    plan = PlanLog(TableRef.parse(table), PIPE).put_plan(
        Plan(PIPE, key.key, "interval", {"key": key.key}, [])
    )
    staged, manifest = stage_rows(table, plan, 0, key.key, rows)
    ours, status = commit_batch(TableRef.parse(table), plan.key, 0, staged, manifest)
    assert ours and status.committed_generation == 0


def _trigger(table: str, key: BatchKey, **kw: Any) -> DeltaBatchTrigger:
    return DeltaBatchTrigger(table_uri=table, pipeline_id=PIPE, batch_key=key.key, **kw)


async def _events(trigger: DeltaBatchTrigger) -> list[dict[str, Any]]:
    """Every event the trigger yields before its run ends."""
    return [event.payload async for event in trigger.run()]


def _sensor(**kw: Any) -> DeltaBatchSensor:
    return DeltaBatchSensor(task_id="confirm", pipeline_id=PIPE, **kw)


# -- the trigger ----------------------------------------------------------------------------


def test_trigger_serialize_round_trip_rebuilds_an_equal_trigger(table: str) -> None:
    from airflow.sdk.module_loading import import_string

    trigger = _trigger(table, _key(20), generation=2, poke_interval=5, timeout_at=1_900_000_000.5)
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_eod.triggers.delta_batch.DeltaBatchTrigger"
    # What the triggerer stores must be plain JSON values.
    assert all(v is None or isinstance(v, str | int | float) for v in kwargs.values()), kwargs
    rebuilt = import_string(classpath)(**kwargs)
    assert isinstance(rebuilt, DeltaBatchTrigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert kwargs == {
        "table_uri": table,
        "pipeline_id": PIPE,
        "batch_key": _key(20).key,
        "generation": 2,
        "poke_interval": 5.0,
        "timeout_at": 1_900_000_000.5,
        "storage_conn_id": None,
    }


def test_trigger_event_arrives_once_the_batch_commits(table: str) -> None:
    # The table exists (another batch is in it), but not the batch the trigger waits for.
    _commit(table, _key(19), [1, 2])
    wanted = _key(20)

    async def scenario() -> list[dict[str, Any]]:
        waiting = asyncio.create_task(_events(_trigger(table, wanted, poke_interval=0.2)))
        await asyncio.sleep(1.0)
        assert not waiting.done(), "the trigger answered before the batch was committed"
        # The commit runs in a thread, as a load in another process would: the loop stays free.
        await asyncio.to_thread(_commit, table, wanted, [3, 4, 5])
        return await asyncio.wait_for(waiting, timeout=30)

    events = asyncio.run(scenario())
    assert len(events) == 1, events
    (event,) = events
    assert event["status"] == "success" and event["batch"] == wanted.label
    result = event["result"]
    assert (result["pipeline_id"], result["batch_key"], result["generation"]) == (PIPE, wanted.key, 0)
    assert (result["table_version"], result["rows"], result["outcome"]) == (1, 3, "committed")


def test_trigger_waits_for_the_generation_asked_for(table: str) -> None:
    """Generation 0 is committed; a trigger asking for generation 1 keeps waiting."""
    _commit(table, _key(20), [1])

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        now = await _events(_trigger(table, _key(20), generation=0))
        later = await _events(
            _trigger(table, _key(20), generation=1, poke_interval=0.2, timeout_at=time.time() + 1)
        )
        return now, later

    now, later = asyncio.run(scenario())
    assert [e["status"] for e in now] == ["success"] and now[0]["result"]["table_version"] == 0
    assert [e["status"] for e in later] == ["timeout"]
    assert _key(20).label in later[0]["message"]


def test_trigger_sends_an_error_event_for_a_table_it_cannot_read(tmp_path: Any) -> None:
    foreign = tmp_path / "not_a_table"
    foreign.mkdir()
    (foreign / "report.csv").write_text("a,b\n1,2\n")
    a_file = tmp_path / "a_file"
    a_file.write_text("x")

    async def scenario() -> list[list[dict[str, Any]]]:
        return [await _events(_trigger(str(path), _key(20), poke_interval=0.1)) for path in (foreign, a_file)]

    on_foreign, on_file = asyncio.run(scenario())
    for path, events in ((foreign, on_foreign), (a_file, on_file)):
        assert len(events) == 1, events
        assert events[0]["status"] == "error" and events[0]["batch"] == _key(20).label
        assert str(path) in events[0]["message"]
    assert on_foreign[0]["message"].startswith("UnsupportedTableError: ")
    assert "is not a Delta table" in on_foreign[0]["message"]


# -- the sensor, without a DAG run ----------------------------------------------------------


def test_default_deferrable_comes_from_the_configuration(monkeypatch: Any, table: str) -> None:
    from airflow_eod.airflow_exceptions import TaskDeferred

    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    assert _sensor(table_uri=table, batch_key=_key(20).key).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    sensor = _sensor(table_uri=table, batch_key=_key(20).key, timeout=90, poke_interval=7)
    assert sensor.deferrable is True
    assert _sensor(table_uri=table, batch_key=_key(20).key, deferrable=False).deferrable is False

    # Built with the configured default, it defers: the trigger carries the batch and the
    # timeout reaches the scheduler through the defer.
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    assert deferred.value.timeout == timedelta(seconds=90)
    assert deferred.value.method_name == "execute_complete"
    trigger = deferred.value.trigger
    assert isinstance(trigger, DeltaBatchTrigger)
    assert (trigger.batch_key, trigger.poke_interval) == (_key(20).key, 7.0)
    assert trigger.timeout_at is not None and 80 < trigger.timeout_at - time.time() <= 90


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferrable", "poke"])
def test_sensor_returns_at_once_when_the_batch_is_committed(table: str, deferrable: bool) -> None:
    _commit(table, _key(20), [1, 2])
    result = _sensor(table_uri=table, batch_key=_key(20).key, deferrable=deferrable).execute({})
    assert (result["batch_key"], result["table_version"], result["rows"]) == (_key(20).key, 0, 2)


def test_deferrable_sensor_skips_and_fails_as_a_poking_one_does(table: str) -> None:
    from airflow_eod.airflow_exceptions import AirflowFailException, AirflowSkipException

    with pytest.raises(AirflowSkipException, match="had nothing to load"):
        _sensor(table_uri=table, batch_key="None", deferrable=True).execute({})
    with pytest.raises(AirflowFailException, match="is not an airflow-eod batch key"):
        _sensor(table_uri=table, batch_key="2026-11-20", deferrable=True).execute({})
    with pytest.raises(AirflowSkipException):
        _sensor(table_uri=table, batch_key="2026-11-20", deferrable=True, soft_fail=True).execute({})


def test_resumed_sensor_tells_a_timeout_from_other_failures(table: str) -> None:
    """What the task runner calls when the task resumes: ``resume_execution``. The scheduler
    ends a deferral that outlived its ``timeout`` with ``__fail__``/``Trigger timeout``; the
    trigger's own deadline sends a ``timeout`` event. Both are AirflowSensorTimeout (no retry),
    both a skip with ``soft_fail``; a failed ask is another error, which retries may fix."""
    from airflow.models.trigger import TriggerFailureReason

    from airflow_eod.airflow_exceptions import AirflowException, AirflowSensorTimeout, AirflowSkipException

    scheduler_timeout = ("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT})
    trigger_timeout = ("execute_complete", {"event": {"status": "timeout", "batch": "b", "message": "late"}})
    ask_failed = (
        "execute_complete",
        {"event": {"status": "error", "batch": "p/k", "message": "OSError: gone"}},
    )

    strict = _sensor(table_uri=table, batch_key=_key(20).key, deferrable=True, timeout=5)
    soft = _sensor(table_uri=table, batch_key=_key(20).key, deferrable=True, timeout=5, soft_fail=True)
    for method, kwargs in (scheduler_timeout, trigger_timeout):
        with pytest.raises(AirflowSensorTimeout):
            strict.resume_execution(method, kwargs, {})
        with pytest.raises(AirflowSkipException):
            soft.resume_execution(method, kwargs, {})
    with pytest.raises(AirflowException, match="batch p/k failed: OSError: gone") as err:
        strict.resume_execution(*ask_failed, {})
    assert not isinstance(err.value, AirflowSensorTimeout)


# -- the sensor under dag.test() -----------------------------------------------------------


def _deferred_in_db(dag_id: str, task_id: str) -> bool:
    """Whether the task instance has deferred (the execution API stored its resume method)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        methods = session.scalars(
            select(TaskInstance.next_method).where(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id == task_id
            )
        ).all()
    return "execute_complete" in methods


def test_deferrable_sensor_succeeds_under_dag_test_once_the_batch_commits(
    airflow_db: str, table: str, monkeypatch: Any, capfd: Any
) -> None:
    _commit(table, _key(19), [1])
    wanted = _key(20)
    monkeypatch.setenv("EOD_TEST_DEFER_TABLE", table)
    monkeypatch.setenv("EOD_TEST_DEFER_KEY", wanted.key)
    module = load_dag_file(DAG_FILE)

    # A load elsewhere commits the batch once the sensor has deferred (not before: then the
    # sensor's first ask would find it and no trigger would run).
    errors: list[BaseException] = []

    def commit_when_deferred() -> None:
        try:
            deadline = time.monotonic() + 90
            while not _deferred_in_db("eod_sensor_deferrable_wait", "confirm"):
                if time.monotonic() > deadline:
                    raise TimeoutError("the sensor never deferred")
                time.sleep(0.2)
            time.sleep(1.5)  # a few of the trigger's asks answer "not yet"
            _commit(table, wanted, [7, 8, 9])
        except BaseException as exc:  # reported by the test thread below
            errors.append(exc)

    # The first query imports and configures Airflow's models: here, not in the thread, where
    # it deadlocked on the import lock with dag.test() importing the same modules.
    assert not _deferred_in_db("eod_sensor_deferrable_wait", "confirm")
    committer = threading.Thread(target=commit_when_deferred, daemon=True)
    committer.start()
    run = module.wait.test()
    committer.join(timeout=60)
    assert not errors, errors

    assert str(run.state) == "success"
    assert task_tries(run.run_id, "confirm") == ["success"]
    result = xcom_value(run.run_id, "confirm")
    assert (result["batch_key"], result["generation"], result["table_version"], result["rows"]) == (
        wanted.key,
        0,
        1,
        3,
    )
    logs = capfd.readouterr()
    out = logs.out + logs.err
    assert "deferring to the triggerer" in out
    assert "not committed at generation 0 yet; asking again" in out, "the trigger never waited"


def test_deferrable_sensor_times_out_without_retries_or_is_skipped_with_soft_fail(
    airflow_db: str, table: str, monkeypatch: Any, capfd: Any
) -> None:
    _commit(table, _key(19), [1])
    monkeypatch.setenv("EOD_TEST_DEFER_TABLE", table)
    monkeypatch.setenv("EOD_TEST_DEFER_KEY", _key(25).key)
    module = load_dag_file(DAG_FILE)

    started = time.monotonic()
    run = module.timeout.test()
    elapsed = time.monotonic() - started

    assert str(run.state) == "failed"
    # retries=2, yet one try: a timeout is AirflowSensorTimeout, which Airflow never retries.
    assert task_tries(run.run_id, "wait") == ["failed"]
    assert task_tries(run.run_id, "wait_soft") == ["skipped"]
    assert elapsed < 90, f"the sensors waited {elapsed:.0f} s on a 3 s timeout"
    logs = capfd.readouterr()
    out = logs.out + logs.err
    assert "AirflowSensorTimeout" in out
    assert f"batch {_key(25).label} was not committed at generation 0 before the sensor's timeout" in out
