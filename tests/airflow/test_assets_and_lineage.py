"""The table as an Airflow Asset (the load's outlet, its event carrying the batch), the
operator's extra link, and OpenLineage facets behind the optional ``openlineage`` extra.

The scheduler tier (tests/airflow/test_scheduler.py) shows a DAG scheduled on the table's Asset run
after a load and read the batch; here ``dag.test()`` shows the asset event itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

import pytest

from airflow_eod.core.result import LoadResult
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from tests.conftest import REPO
from tests.support.helpers import load_dag_file, xcom_value

pytestmark = pytest.mark.airflow

AIRFLOW_VERSION = tuple(int(p) for p in version("apache-airflow").split(".")[:2])


def _load_op(table: str, **kwargs: Any) -> LandingFilesToDeltaOperator:
    return LandingFilesToDeltaOperator(
        task_id="load", landing_path="/landing/orders", table_uri=table, **kwargs
    )


def test_the_table_is_the_loads_outlet_asset() -> None:
    from airflow.sdk import Asset

    (asset,) = _load_op("/lake/or ders#1").outlets
    assert isinstance(asset, Asset) and asset.uri == "file:///lake/or%20ders%231"
    assert _load_op("file:///lake/orders").outlets[0].uri == TableRef.parse("/lake/orders").asset_uri
    assert _load_op("{{ params.table }}").outlets == [], "a templated table has no URI at parse time"
    mine = Asset(uri="file:///elsewhere")
    assert _load_op("/lake/orders", outlets=[mine]).outlets == [mine], "an explicit outlet is kept"


def test_the_extra_link_points_at_the_table() -> None:
    op = _load_op("/lake/orders")
    (link,) = op.operator_extra_links
    assert link.name == "Delta table"
    assert link.get_link(op, ti_key=None) == "file:///lake/orders"


@pytest.mark.spark
@pytest.mark.skipif(
    AIRFLOW_VERSION < (3, 2),
    reason="Airflow 3.1's dag.test() registers a DAG's assets only while the DAG has no version "
    "yet, so this session's earlier runs of the example DAG (with other table paths) leave this "
    "table's asset unregistered and its event unrecorded; a deployment registers assets when it "
    "parses the DAG",
)
def test_the_asset_event_of_a_load_carries_the_batch(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: Any
) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 30)
    monkeypatch.setenv("EOD_DEMO_LANDING", landing)
    monkeypatch.setenv("EOD_DEMO_TABLE", table)
    module = load_dag_file(os.path.join(REPO, "dags", "eod_landing_files_example.py"))
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    assert str(run.state) == "success"
    loaded = xcom_value(run.run_id, "load_orders")
    with create_session() as session:
        events = session.scalars(
            select(AssetEvent)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .where(AssetModel.uri == TableRef.parse(table).asset_uri)
        ).all()
        extras = [dict(e.extra) for e in events]
    assert len(extras) == 1, extras
    assert extras[0] == loaded and extras[0]["rows"] == 60 and extras[0]["outcome"] == "committed"


def _result(outcome: str = "committed") -> LoadResult:
    return LoadResult("dag.load", "o-00000000-abc", 0, 3, 60, 2, outcome, "/lake/orders")


def test_lineage_facets_name_the_landing_files_and_the_table() -> None:
    op = _load_op("/lake/orders")
    op._result = _result()
    lineage = op.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [("file", "/landing/orders")]
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("file", "/lake/orders")
    assert out.outputFacets["outputStatistics"].rowCount == 60
    op._result = _result("already_committed")
    assert op.get_openlineage_facets_on_complete(None).outputs[0].outputFacets == {}, "nothing new written"


def test_lineage_of_a_jdbc_load_names_the_database_table(monkeypatch: Any) -> None:
    conn = {"conn_type": "postgres", "host": "db.internal", "port": 6432, "schema": "sales", "login": "u"}
    monkeypatch.setenv("AIRFLOW_CONN_SALES_DB", json.dumps(conn))
    op = JdbcToDeltaOperator(
        task_id="load", jdbc_conn_id="sales_db", source_table="orders", key_column="id", table_uri="/lake/o"
    )
    lineage = op.get_openlineage_facets_on_complete(None)
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("postgres://db.internal:6432", "sales.public.orders")
    ]


def test_without_the_openlineage_extra_nothing_of_it_is_imported() -> None:
    """A process in which OpenLineage cannot be imported (the extra is not installed) makes
    and runs the lineage hook of an operator: no error, no facets; and importing the
    operators never imports the OpenLineage client or its facets, extra or not."""
    code = """
import sys, importlib.abc

class NoOpenLineage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "openlineage" or name.startswith("airflow.providers.openlineage.extractors"):
            raise ImportError(f"{name} is not installed")
        return None

if sys.argv[1] == "blocked":
    sys.meta_path.insert(0, NoOpenLineage())
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
op = LandingFilesToDeltaOperator(task_id="t", landing_path="/l", table_uri="/lake/t")
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "openlineage" or ".openlineage.extractors" in m)
print(loaded)
if sys.argv[1] == "blocked":
    print(op.get_openlineage_facets_on_complete(None))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EOD_")}
    for mode, want in (("installed", ["[]"]), ("blocked", ["[]", "None"])):
        out = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, env=env, cwd=REPO, check=True
        ).stdout.split()
        assert out == want, f"{mode}: {out}"
