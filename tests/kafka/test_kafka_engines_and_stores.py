"""Kafka batches written by the other engine (Delta Spark) and into a table on S3: a crash at
each boundary the path has, the retry, and the row-by-row check against Kafka. The write
paths themselves are tested per engine and store with the other sources; these tests show the
Kafka source's frozen ranges reach them unchanged."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from tests.support.kafka_helpers import (
    PIPELINE,
    check_exactly_once,
    ctx_for,
    kafka_records,
    kafka_source,
    records,
    topic_name,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.faults]

# The boundaries each path has: Delta Spark commits inside its write (no staged files of
# its own before the commit), the delta-rs engine on S3 has all four.
TARGETS = {
    "delta-spark": ["before_write", "after_commit"],
    "s3": ["before_write", "after_stage", "before_commit", "after_commit"],
}


@pytest.fixture(params=sorted(TARGETS))
def target(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, TableRef]:
    if request.param == "delta-spark":
        if not os.environ.get("EOD_DELTA_SPARK_JARS"):
            pytest.skip("the Delta Spark jars are not on the session's class path (EOD_DELTA_SPARK_JARS)")
        return "delta-spark", TableRef.parse(str(tmp_path / "events"))
    s3_server = request.getfixturevalue("s3_server")
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    return "s3", TableRef.parse(
        f"s3://{s3_server.bucket}/kafka/{uuid.uuid4().hex}/events", s3_server.options()
    )


def test_a_crash_at_each_boundary_of_the_engine_or_store_then_the_retry_loads_each_record_once(
    spark: Any, kafka_broker: Any, target: tuple[str, TableRef], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, ref = target
    engine = "delta-spark" if kind == "delta-spark" else "delta-rs"
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    log = PlanLog(ref, PIPELINE)
    points = TARGETS[kind]
    keys = []
    for n, point in enumerate(points):
        kafka_broker.produce(topic, records(6, 2, start=6 * n))
        plan = source.plan(log, ctx, run_token=f"run-{n}", is_committed=lambda k: ask(ref, k).committed)
        assert plan is not None

        def spec(try_number: int, plan: Any = plan, n: int = n) -> LoadSpec:
            settings = LoadSettings(run_id=f"run-{n}", try_number=try_number, engine=engine)
            return LoadSpec(table=ref, plan=plan, source=source, settings=settings)

        monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
        with pytest.raises(InjectedFault):
            run_load(spark, spec(1))
        monkeypatch.delenv("EOD_FAULTPOINTS")
        # The retry replans the same frozen ranges, whatever arrived since.
        kafka_broker.produce(topic, records(2, 2, start=1000 + 2 * n))
        again = source.plan(log, ctx, run_token=f"run-{n}", is_committed=lambda k: ask(ref, k).committed)
        assert again == plan
        result = run_load(spark, spec(2))
        assert result.outcome == ("already_committed" if point == "after_commit" else "committed"), point
        assert ask(ref, plan.key).committed
        keys.append(plan.key)
    # Drain what arrived during the retries, then: one commit per batch, each record once.
    n = len(points)
    while (
        plan := source.plan(log, ctx, run_token=f"run-{n}", is_committed=lambda k: ask(ref, k).committed)
    ) is not None:
        settings = LoadSettings(run_id=f"run-{n}", try_number=1, engine=engine)
        run_load(spark, LoadSpec(table=ref, plan=plan, source=source, settings=settings))
        keys.append(plan.key)
        n += 1
    # Every batch in its own commit, and no commit but theirs (the first creates the table).
    versions = {ask(ref, key).table_version for key in keys}
    history = DeltaTable(ref.location, storage_options=ref.storage_options).history()
    assert len(versions) == len(keys) == n
    assert len(history) - (0 if 0 in versions else 1) == n, [h.get("operation") for h in history]
    check_exactly_once(ref.location, kafka_records(kafka_broker, topic), ref.storage_options or None)
