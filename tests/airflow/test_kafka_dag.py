"""The Kafka example DAG (dags/eod_kafka_example.py) under ``dag.test()`` against the session's
broker, with its brokers and credentials from an Airflow ``kafka`` connection: a crash after
a commit and the retry commit each batch once, ``catch_up`` drains the topic in one run, and
over SASL the password is in no task log, XCom value, plan-log file or Delta commit. Each run
is checked row by row against what Kafka holds."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import REPO
from tests.support.helpers import load_dag_file, task_tries, txn_commits, xcom_value
from tests.support.kafka_helpers import check_exactly_once, kafka_records, records, topic_name

pytestmark = [pytest.mark.airflow, pytest.mark.kafka, pytest.mark.spark]

LOAD, CONFIRM = "load_events", "confirm_events"


def _dag(
    monkeypatch: pytest.MonkeyPatch, conn_id: str, conn: dict[str, Any], topic: str, table: str, cap: int
) -> ModuleType:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    monkeypatch.setenv("EOD_KAFKA_CONN", conn_id)
    monkeypatch.setenv("EOD_KAFKA_TOPICS", topic)
    monkeypatch.setenv("EOD_KAFKA_TABLE", table)
    monkeypatch.setenv("EOD_KAFKA_MAX_RECORDS", str(cap))
    return load_dag_file(os.path.join(REPO, "dags", "eod_kafka_example.py"))


def _run(module: ModuleType, when: datetime, faults: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("EOD_FAULTPOINTS", faults)
    try:
        return module.dag.test(logical_date=when)
    finally:
        monkeypatch.delenv("EOD_FAULTPOINTS")


@pytest.mark.airflow_current_only
def test_the_kafka_dag_retries_crashes_after_and_before_a_commit_and_drains_the_topic(
    airflow_db: str, spark: Any, kafka_broker: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, table = topic_name("dag"), str(tmp_path / "events")
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, records(30, 3))
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_broker.bootstrap}}
    module = _dag(monkeypatch, "eod_test_kafka", conn, topic, table, cap=12)

    # Try 1 commits batch 1 of 3 and dies; try 2 finds it committed and drains the rest.
    run = _run(module, datetime(2026, 11, 20, 1, tzinfo=UTC), "after_commit=raise@1", monkeypatch)
    assert str(run.state) == "success"
    assert task_tries(run.run_id, LOAD) == ["failed", "success"]
    result = xcom_value(run.run_id, LOAD)
    outcomes = [(b["outcome"], b["rows"]) for b in result["batches"]]
    assert outcomes == [("already_committed", 12), ("committed", 12), ("committed", 6)], result
    assert (result["rows_loaded"], result["drained"]) == (18, True), result
    assert xcom_value(run.run_id, CONFIRM)["batch_key"] == result["batch_key"]
    commits = txn_commits(table)
    assert len(commits) == 3 == len(set(commits)), f"each batch committed once: {commits}"
    check_exactly_once(table, kafka_records(kafka_broker, topic))

    # New records: the next run starts where the last batch ended. Its try 1 dies after
    # staging, before the commit; try 2 reads the same frozen range and commits it once.
    kafka_broker.produce(topic, records(7, 3, start=30))
    run2 = _run(module, datetime(2026, 11, 20, 2, tzinfo=UTC), "after_stage=raise@1", monkeypatch)
    assert task_tries(run2.run_id, LOAD) == ["failed", "success"]
    second = xcom_value(run2.run_id, LOAD)
    assert [(b["outcome"], b["rows"]) for b in second["batches"]] == [("committed", 7)], second
    check_exactly_once(table, kafka_records(kafka_broker, topic))
    # Then nothing is new.
    run3 = _run(module, datetime(2026, 11, 20, 3, tzinfo=UTC), "", monkeypatch)
    assert xcom_value(run3.run_id, LOAD)["outcome"] == "no_new_data"
    assert task_tries(run3.run_id, CONFIRM) == ["skipped"], "no batch to confirm"
    commits = txn_commits(table)
    assert len(commits) == 4 == len(set(commits)), f"each batch committed once: {commits}"


def test_a_sasl_connection_loads_and_its_password_is_written_nowhere(
    airflow_db: str,
    spark: Any,
    kafka_broker: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    password = kafka_broker.sasl_password
    topic, table = topic_name("sasl"), str(tmp_path / "events")
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(20, 2))
    conn = {
        "conn_type": "kafka",
        "login": kafka_broker.sasl_user,
        "password": password,
        "extra": {
            "bootstrap.servers": kafka_broker.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
        },
    }
    module = _dag(monkeypatch, "eod_test_kafka_sasl", conn, topic, table, cap=1000)
    run = _run(module, datetime(2026, 11, 21, 1, tzinfo=UTC), "", monkeypatch)
    log = capfd.readouterr()
    assert str(run.state) == "success", log.out[-4000:]
    result = xcom_value(run.run_id, LOAD)
    assert [(b["outcome"], b["rows"]) for b in result["batches"]] == [("committed", 20)], result
    check_exactly_once(table, kafka_records(kafka_broker, topic))

    # The task ran (its log reached us) and the password is in none of what it left.
    from airflow.sdk._shared.secrets_masker import redact

    assert "result {" in log.out + log.err, "the task's log was captured"
    assert password not in str(redact(f"login {password}")), "the hook registered the password"
    assert password not in log.out and password not in log.err, "the password is in the task log"
    assert password not in json.dumps(result)
    assert password not in json.dumps(xcom_value(run.run_id, CONFIRM))
    logs = os.path.join(airflow_db, "logs")
    written = [table] + ([logs] if os.path.isdir(logs) else [])
    seen = 0
    for top in written:
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                with open(os.path.join(dirpath, name), "rb") as fh:
                    assert password.encode() not in fh.read(), os.path.join(dirpath, name)
                seen += 1
    assert os.path.isdir(os.path.join(table, "_eod")) and seen > 3, "the plan log and commits were read"


@pytest.mark.airflow_current_only
def test_deleted_records_end_the_task_and_one_run_s_conf_accepts_the_loss_without_a_dag_change(
    airflow_db: str, spark: Any, kafka_broker: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention took records no batch loaded: the run fails at once (no retry can bring them
    back) naming the conf that accepts the loss; a run triggered with that conf loads the rest
    and records the skipped offsets; the next run is strict again."""
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.core.table_ref import TableRef

    topic, table = topic_name("loss"), str(tmp_path / "events")
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(8, 2))
    conn = {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_broker.bootstrap}}
    module = _dag(monkeypatch, "eod_test_kafka_loss", conn, topic, table, cap=1000)
    first = _run(module, datetime(2026, 11, 22, 1, tzinfo=UTC), "", monkeypatch)
    assert str(first.state) == "success"
    kafka_broker.produce(topic, records(8, 2, start=8))  # offsets 4..7 of each partition
    kafka_broker.delete_records(topic, {0: 6})  # 4 and 5 of partition 0: never loaded
    refused = _run(module, datetime(2026, 11, 22, 2, tzinfo=UTC), "", monkeypatch)
    assert str(refused.state) == "failed"
    assert task_tries(refused.run_id, LOAD) == ["failed"], "an error no retry can fix ends the task"

    pipeline = "eod_kafka_example.load_events"
    conf = {"eod_pipeline": pipeline, "eod_data_loss": "skip"}
    accepted = module.dag.test(logical_date=datetime(2026, 11, 22, 3, tzinfo=UTC), run_conf=conf)
    assert str(accepted.state) == "success"
    result = xcom_value(accepted.run_id, LOAD)
    assert [(b["outcome"], b["rows"]) for b in result["batches"]] == [("committed", 6)], result
    plan = PlanLog(TableRef.parse(table), pipeline).get_plan(result["batch_key"])
    assert plan is not None
    assert [i.get("skipped") for i in plan.inputs] == [[4, 6], None]
    kept = [r for r in kafka_records(kafka_broker, topic)]
    first_batch = [(topic, p, o, f"r-{o * 2 + p}") for p in (0, 1) for o in range(4)]
    check_exactly_once(table, first_batch + [r for r in kept if r[2] >= 4])

    # Strict again: records deleted below the frontier of a later run are refused once more.
    kafka_broker.produce(topic, records(4, 2, start=16))
    kafka_broker.delete_records(topic, {1: 10})
    again = _run(module, datetime(2026, 11, 22, 4, tzinfo=UTC), "", monkeypatch)
    assert str(again.state) == "failed"
