"""A single-pass load (issue 7): with a schema and no transform, the batch is read FAILFAST
and written in one pass, as a plain Spark write would; a batch that holds malformed records
fails that write, before its commit, and is then read again to fail with the same per-file
message as a batch counted up front.

What Spark ran is read from its SQL status store (the plans and metrics of every SQL
execution of the session), so the tests count the file scans a load really made.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchError, MalformedInputError
from airflow_eod.core.table_layout import batch_dir
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import orders_source, plan_for, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.badinput]

CSV_HEADER = "order_id,customer,amount,order_date,ordered_at\n"
GOOD_ROW = "{id},c,1.00,2026-11-01,2026-11-01T00:00:00Z\n"
BAD_AMOUNT = "{id},c,not-money,2026-11-01,2026-11-01T00:00:00Z\n"


@dataclass
class _Execution:
    description: str
    nodes: list[tuple[str, dict[str, str]]] = field(default_factory=list)  # (name, metrics)

    def scans(self) -> list[dict[str, str]]:
        return [m for name, m in self.nodes if name.startswith("Scan csv")]


@contextmanager
def _sql_executions(spark: Any) -> Iterator[list[_Execution]]:
    """The SQL executions the block ran, with each plan node's name and metric values."""
    store = spark._jsparkSession.sharedState().statusStore()
    bus = spark.sparkContext._jsc.sc().listenerBus()

    def ids() -> set[int]:
        bus.waitUntilEmpty()  # the store is fed by the listener bus, asynchronously
        runs = store.executionsList()
        return {int(runs.apply(i).executionId()) for i in range(runs.size())}

    before = ids()
    found: list[_Execution] = []
    yield found
    for eid in sorted(ids() - before):
        values = store.executionMetrics(eid)
        nodes = store.planGraph(eid).allNodes()
        run = _Execution(str(store.execution(eid).get().description()))
        for i in range(nodes.size()):
            node = nodes.apply(i)
            metrics = {}
            for k in range(node.metrics().size()):
                metric = node.metrics().apply(k)
                if values.contains(metric.accumulatorId()):
                    metrics[str(metric.name())] = str(values.apply(metric.accumulatorId()))
            run.nodes.append((str(node.name()), metrics))
        found.append(run)


def _rows(metrics: dict[str, str]) -> int:
    return int(metrics.get("number of output rows", "0").replace(",", ""))


def _write(path: str, body: str) -> None:
    with open(path, "w") as fh:
        fh.write(CSV_HEADER + body)


def test_malformed_records_in_two_files_fail_with_per_file_counts_and_commit_nothing(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    run_load(spark, spec_for(source, table, plan_for(source, table, run="seed")))
    version = open_table(TableRef.parse(table)).version()  # type: ignore[union-attr]
    _write(os.path.join(landing, "z-bad1.csv"), GOOD_ROW.format(id=100) + BAD_AMOUNT.format(id=101) * 2)
    _write(os.path.join(landing, "z-bad2.csv"), BAD_AMOUNT.format(id=102) + GOOD_ROW.format(id=103))
    plan = plan_for(source, table, run="bad")
    with _sql_executions(spark) as runs, pytest.raises(MalformedInputError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: 3 malformed record(s)")
    assert "z-bad1.csv: 2" in text and "z-bad2.csv: 1" in text and "nothing was committed" in text
    # explain_malformed's part: the failing column and its declared type.
    assert "column(s) amount (declared DECIMAL(10,2)" in text
    after = open_table(TableRef.parse(table))
    assert after is not None and after.version() == version
    assert (
        after.transaction_version(plan.key.app_id) is None
        and not ask(TableRef.parse(table), plan.key).committed
    )
    # The staging write came first (no pass before it); the failure's second pass named the files.
    reading = [run for run in runs if run.scans()]
    assert len(reading) >= 2
    assert any(n.startswith("Execute InsertIntoHadoopFsRelationCommand") for n, _ in reading[0].nodes)
    assert not any(n.startswith("InMemory") for n, _ in reading[0].nodes)
    staged = os.path.join(table, batch_dir(plan.key))
    assert not os.path.isdir(staged) or not os.listdir(staged), "the failed attempt's files are left"


def test_the_good_path_reads_the_source_files_once(spark: Any, landing: str, table: str) -> None:
    rows = write_order_files(landing, 3, 200)
    source = orders_source(landing)
    plan = plan_for(source, table)
    with _sql_executions(spark) as runs:
        result = run_load(spark, spec_for(source, table, plan))
    assert result.outcome == "committed" and result.rows == rows
    reading = [run for run in runs if run.scans()]
    assert len(reading) == 1, [run.description for run in reading]
    assert sum(_rows(scan) for scan in reading[0].scans()) == rows
    names = [name for run in runs for name, _ in run.nodes]
    assert not [n for n in names if n.startswith("InMemory")], names  # nothing was cached
    assert any(name.startswith("Execute InsertIntoHadoopFsRelationCommand") for name, _ in reading[0].nodes)


def test_a_bad_value_in_a_column_the_transform_drops_still_fails_the_batch(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 1, 10)
    _write(os.path.join(landing, "z-bad.csv"), GOOD_ROW.format(id=100) + BAD_AMOUNT.format(id=101))
    source = orders_source(landing)
    plan = plan_for(source, table)
    with pytest.raises(MalformedInputError) as err:
        run_load(spark, spec_for(source, table, plan), transform=lambda df: df.drop("amount"))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: 1 malformed record(s)") and "z-bad.csv: 1" in text
    assert open_table(TableRef.parse(table)) is None and not ask(TableRef.parse(table), plan.key).committed


def test_malformed_json_fails_the_single_pass_write_with_per_file_counts(
    spark: Any, tmp_path: Any, table: str
) -> None:
    landing = str(tmp_path / "json")
    os.makedirs(landing)
    with open(os.path.join(landing, "a.json"), "w") as fh:
        fh.write('{"id": 1, "name": "x"}\n{"id": "two", "name": "y"}\n{"id": 3\n')
    with open(os.path.join(landing, "b.json"), "w") as fh:
        fh.write('{"id": 4, "name": "z"}\n')
    source = LandingFilesSource(path=landing, file_format="json", schema="id INT, name STRING")
    plan = plan_for(source, table)
    with pytest.raises(MalformedInputError) as err:
        run_load(spark, spec_for(source, table, plan))
    text = str(err.value)
    assert text.startswith(f"batch {plan.key.label}: 2 malformed record(s)") and "a.json: 2" in text
    assert "b.json" not in text.split("(")[1].split(")")[0]
    assert open_table(TableRef.parse(table)) is None and not ask(TableRef.parse(table), plan.key).committed


def test_a_write_that_fails_for_another_reason_is_not_called_malformed(
    spark: Any, landing: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure path reads the batch again; when that finds nothing malformed, the write's
    own error is the one reported, and the attempt's files are gone."""
    write_order_files(landing, 2, 50)
    source = orders_source(landing)
    plan = plan_for(source, table)
    from airflow_eod.spark import staging

    real = staging.stage_dataframe

    def full_disk(df: Any, table_uri: str, batch: Any, generation: int, attempt: str, parts: Any) -> Any:
        real(df, table_uri, batch, generation, attempt, parts)  # the files are written...
        raise OSError(28, "No space left on device")  # ...and then the write fails

    monkeypatch.setattr(staging, "stage_dataframe", full_disk)
    with pytest.raises(BatchError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert not isinstance(err.value, MalformedInputError)
    assert "No space left on device" in str(err.value) and plan.key.label in str(err.value)
    staged = os.path.join(table, batch_dir(plan.key))
    assert not os.path.isdir(staged) or not os.listdir(staged), "the failed attempt's files are left"
    assert open_table(TableRef.parse(table)) is None
