"""Airflow tier: the provider registers, and the example DAG runs under ``dag.test()``,
including a retry after a crash that happened after the commit."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import jsonschema
import pytest
from deltalake import DeltaTable

from airflow_eod.examples.sample_data import write_order_files
from tests.conftest import REPO
from tests.support.helpers import check, load_dag_file, task_tries, xcom_value

pytestmark = pytest.mark.airflow


def test_provider_info_validates_against_airflows_schema() -> None:
    import airflow

    from airflow_eod.get_provider_info import get_provider_info

    schema_path = os.path.join(os.path.dirname(airflow.__file__), "provider_info.schema.json")
    with open(schema_path) as fh:
        jsonschema.validate(get_provider_info(), json.load(fh))
    for group in ("operators", "sensors", "triggers", "hooks"):
        for entry in get_provider_info()[group]:
            for module in entry["python-modules"]:
                importlib.import_module(module)


def test_provider_info_lists_every_operator_hook_sensor_and_trigger_module() -> None:
    """A module that defines an operator, hook, sensor or trigger is in the provider info
    (the Kafka operator and hook were added with the source, issue 23)."""
    import inspect
    import pkgutil

    from airflow.sdk import BaseHook, BaseOperator
    from airflow.triggers.base import BaseTrigger

    import airflow_eod
    from airflow_eod.get_provider_info import get_provider_info

    info = get_provider_info()
    listed = {
        m
        for group in ("operators", "sensors", "triggers", "hooks")
        for e in info[group]
        for m in e["python-modules"]
    }
    defining = set()
    for sub in ("operators", "hooks", "sensors", "triggers"):
        path = [os.path.join(os.path.dirname(airflow_eod.__file__), sub)]
        for mod in pkgutil.iter_modules(path, f"airflow_eod.{sub}."):
            module = importlib.import_module(mod.name)
            for _name, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == mod.name and issubclass(cls, (BaseOperator, BaseHook, BaseTrigger)):
                    defining.add(mod.name)
    assert {"airflow_eod.operators.kafka_to_delta", "airflow_eod.hooks.kafka_source"} <= defining
    assert defining - listed == set(), "modules missing from get_provider_info"


def test_airflow_providers_list_shows_the_provider(airflow_db: str) -> None:
    out = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "airflow"), "providers", "list", "-o", "json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    names = {p["package_name"] for p in json.loads(out[out.index("[") :])}
    assert "airflow-eod" in names


def test_every_example_dag_parses(airflow_db: str) -> None:
    """The DAG files of dags/ parse with their defaults (no server, no Spark, no broker), as a
    dag-processor would parse them; the Kafka example is among them."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

    bag = DagBag(dag_folder=os.path.join(REPO, "dags"), safe_mode=False)
    assert bag.import_errors == {}
    files = sorted(f[:-3] for f in os.listdir(os.path.join(REPO, "dags")) if f.endswith(".py"))
    assert sorted(bag.dag_ids) == files
    kafka = bag.dags["eod_kafka_example"]
    assert sorted(kafka.task_ids) == ["confirm_events", "load_events"]
    assert kafka.get_task("load_events").catch_up is True


def _example_dag(landing: str, table: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("EOD_DEMO_LANDING", landing)
    monkeypatch.setenv("EOD_DEMO_TABLE", table)
    return load_dag_file(os.path.join(REPO, "dags", "eod_landing_files_example.py"))


@pytest.mark.spark
@pytest.mark.faults
def test_example_dag_retry_after_a_crash_after_commit_writes_nothing(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 3, 100)
    module = _example_dag(landing, table, monkeypatch)
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1")
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert str(run.state) == "success"
    assert task_tries(run.run_id, "load_orders") == ["failed", "success"]
    result = xcom_value(run.run_id, "load_orders")
    assert result["outcome"] == "already_committed" and result["rows"] == 300
    confirmed = xcom_value(run.run_id, "confirm_orders")
    assert confirmed["batch_key"] == result["batch_key"] and confirmed["table_version"] == 0
    assert DeltaTable(table).version() == 0, "the retry added no table version"
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 300, cmp.describe()

    # The next DAG run loads only the files that arrived since, once.
    write_order_files(landing, 2, 100, first_id=10_000)
    run2 = module.dag.test(logical_date=datetime(2026, 11, 21, tzinfo=UTC))
    assert str(run2.state) == "success"
    second = xcom_value(run2.run_id, "load_orders")
    assert second["outcome"] == "committed" and second["rows"] == 200 and second["table_version"] == 1
    assert second["batch_key"] != result["batch_key"]
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 500, cmp.describe()


def test_sensor_times_out_on_a_batch_that_was_never_committed(
    airflow_db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EOD_TEST_TABLE", str(tmp_path / "no_table"))
    module = load_dag_file(os.path.join(REPO, "tests", "dags", "eod_sensor_negative.py"))
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    assert str(run.state) == "failed"
    assert task_tries(run.run_id, "wait_poke")[-1] == "failed"
    assert task_tries(run.run_id, "wait_reschedule")[-1] == "failed"


@pytest.mark.spark
def test_restating_a_batch_from_a_dag_param(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 50)
    module = _example_dag(landing, table, monkeypatch)
    first = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    loaded = xcom_value(first.run_id, "load_orders")
    assert loaded["outcome"] == "committed" and loaded["generation"] == 0
    # The files of that batch are corrected in place; a restating run re-loads them.
    for name in sorted(os.listdir(landing)):
        os.unlink(os.path.join(landing, name))
    write_order_files(landing, 2, 30, first_id=7000)
    old_names = sorted(os.listdir(landing))
    for old, new in zip(old_names, ["orders-000001-0000.csv", "orders-000001-0001.csv"], strict=True):
        os.rename(os.path.join(landing, old), os.path.join(landing, new))
    run = module.dag.test(
        logical_date=datetime(2026, 11, 21, tzinfo=UTC),
        run_conf={"restate": True, "restate_batch_key": loaded["batch_key"]},
    )
    assert str(run.state) == "success"
    restated = xcom_value(run.run_id, "load_orders")
    assert (restated["outcome"], restated["generation"], restated["rows"]) == ("committed", 1, 60)
    assert xcom_value(run.run_id, "confirm_orders")["generation"] == 1
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()
