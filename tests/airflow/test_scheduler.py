"""The production-like tier: a real Airflow 3 scheduler (LocalExecutor), dag-processor and
api-server on a PostgreSQL metadata DB run the loads, and the tests act on them from outside
as an operator would: ``kill -9`` of a task process, ``airflow tasks clear``, ``airflow
backfill create``. Each test ends with the checker comparing the table with its source row
by row.

PostgreSQL and Airflow start once for the module (tests/support/airflow_services.py); the DAGs are
in tests/scheduler_dags/ and find their directories through ``EOD_SCHED_ROOT``.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.manifest import Manifest
from airflow_eod.examples.compare import compare_table_with_landing
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS
from tests.scheduler_dags.slow_transform import ROOT_ENV, pid_file, started_file
from tests.support.airflow_services import AirflowServices, running_airflow

pytestmark = [pytest.mark.scheduler, pytest.mark.slow]

DAGS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "scheduler_dags"))
DAG_FILES = [
    os.path.join(DAGS, f) for f in ("eod_sched_kill.py", "eod_sched_intervals.py", "eod_sched_assets.py")
]
DAG_IDS = [
    "eod_sched_kill",
    "eod_sched_clear",
    "eod_sched_backfill",
    "eod_sched_asset_load",
    "eod_sched_asset_reader",
]
TASK = "load"


@dataclass
class Tier:
    airflow: AirflowServices
    root: str

    def landing(self, name: str) -> str:
        return os.path.join(self.root, name, "landing")

    def table(self, name: str) -> str:
        return os.path.join(self.root, name, "table")


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    root = str(tmp_path_factory.mktemp("eod-sched"))
    with running_airflow(DAG_FILES, {ROOT_ENV: root}) as airflow:
        with airflow.logs_on_failure():
            airflow.wait_for_dags(DAG_IDS)
        yield Tier(airflow, root)


def _write_orders(directory: str, day: datetime, files: int, rows_per_file: int, first_id: int = 1) -> int:
    """CSV order files of one day; returns the rows written. One order date per day keeps a
    batch to one partition (a few files), as a daily load's would be, and the Spark job short."""
    os.makedirs(directory, exist_ok=True)
    order_id = first_id
    for f in range(files):
        lines = ["order_id,customer,amount,order_date,ordered_at"]
        for _ in range(rows_per_file):
            at = day + timedelta(seconds=order_id * 7 % 86400, microseconds=order_id % 1000)
            lines.append(
                f"{order_id},customer-{order_id % 50:02d},{order_id % 9973 / 100:.2f},"
                f"{day.date().isoformat()},{at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
            )
            order_id += 1
        with open(os.path.join(directory, f"orders-{first_id:06d}-{f:04d}.csv"), "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return order_id - first_id


def _exact(table: str, landing: str) -> None:
    cmp = compare_table_with_landing(table, landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    assert cmp.source_rows > 0
    assert cmp.exact, cmp.describe()


def _committing_tries(table: str) -> list[tuple[str, int | None]]:
    """(batch key, try number) of each commit that carries a manifest, read from the JSON log."""
    log_dir = os.path.join(table, "_delta_log")
    found = []
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json") and n[:20].isdigit()):
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh:
                info = json.loads(line).get("commitInfo") if line.strip() else None
                manifest = Manifest.from_user_metadata(info.get("userMetadata")) if info else None
                if manifest is not None:
                    found.append((manifest.batch_key, manifest.try_number))
    return found


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as fh:
            return int(fh.read())
    except FileNotFoundError:
        return None


def test_task_killed_with_sigkill_mid_spark_job_is_retried_and_loads_every_row_once(tier: Tier) -> None:
    airflow, run_id = tier.airflow, "kill-run"
    landing, table = tier.landing("kill"), tier.table("kill")
    rows = _write_orders(landing, datetime(2026, 1, 20, tzinfo=UTC), files=3, rows_per_file=200)
    with airflow.logs_on_failure():
        airflow.cli("dags", "trigger", "eod_sched_kill", "--run-id", run_id)
        pid = airflow.wait_for(lambda: _read_pid(pid_file(tier.root)), 150, "the first try's pid")
        airflow.wait_for(
            lambda: os.path.exists(started_file(tier.root)), 90, "the first try's Spark job to run"
        )
        ti = airflow.task_instance("eod_sched_kill", run_id, TASK)
        # The pid is the process Airflow runs the try in, and nothing is committed yet: the
        # kill lands in the middle of the Spark job, between plan and commit.
        assert (ti["state"], ti["try_number"], ti["pid"]) == ("running", 1, pid)
        assert not os.path.exists(os.path.join(table, "_delta_log"))
        os.kill(pid, signal.SIGKILL)

        assert airflow.wait_for_run("eod_sched_kill", run_id, timeout=180) == "success"
        ti = airflow.task_instance("eod_sched_kill", run_id, TASK)
        assert ti["state"] == "success" and ti["try_number"] >= 2, ti
        first = airflow.earlier_tries("eod_sched_kill", run_id, TASK)[0]
        assert (first["try_number"], first["state"]) == (1, "failed"), first
        result = airflow.xcom_return("eod_sched_kill", run_id, TASK)
        assert result["outcome"] == "committed" and result["rows"] == rows, result
        # One commit, by the retry that Airflow started after the kill.
        assert _committing_tries(table) == [(result["batch_key"], ti["try_number"])]
        _exact(table, landing)


def test_cleared_successful_run_reruns_as_already_committed_and_writes_nothing(tier: Tier) -> None:
    airflow, dag_id, run_id = tier.airflow, "eod_sched_clear", "clear-run"
    table = tier.table("clear")
    # A manual run at midnight of 01-10 covers the day before (the last complete interval).
    day = tier.landing("clear")
    _write_orders(
        os.path.join(day, "2026-01-09"), datetime(2026, 1, 9, tzinfo=UTC), files=2, rows_per_file=300
    )
    logical = "2026-01-10T00:00:00+00:00"
    with airflow.logs_on_failure():
        airflow.trigger(dag_id, run_id, logical)
        assert airflow.wait_for_run(dag_id, run_id) == "success"
        (interval_start,) = airflow.query(
            "SELECT data_interval_start FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id)
        )[0]
        assert interval_start == datetime(2026, 1, 9, tzinfo=UTC)
        first = airflow.xcom_return(dag_id, run_id, TASK)
        assert first["outcome"] == "committed", first
        version = DeltaTable(table).version()
        assert first["table_version"] == version

        # `-t` plainly: Airflow 3.3 matches it as a substring of task ids, not as a regex, so
        # "^load$" would clear nothing (and still exit 0).
        airflow.cli("tasks", "clear", dag_id, "-t", TASK, "-s", logical, "-e", logical, "--yes")
        airflow.wait_for(
            lambda: (
                airflow.task_instance(dag_id, run_id, TASK)["try_number"] >= 2
                and airflow.run_state(dag_id, run_id) in ("success", "failed")
            ),
            150,
            "the cleared task to run again",
        )
        assert airflow.run_state(dag_id, run_id) == "success"
        assert airflow.task_instance(dag_id, run_id, TASK)["state"] == "success"
        again = airflow.xcom_return(dag_id, run_id, TASK)
        assert again["outcome"] == "already_committed", again
        assert (again["batch_key"], again["table_version"]) == (first["batch_key"], version)
        assert DeltaTable(table).version() == version
        _exact(table, day)


def test_backfill_backwards_with_parallel_runs_loads_every_interval_once(tier: Tier) -> None:
    airflow, dag_id = tier.airflow, "eod_sched_backfill"
    landing, table = tier.landing("backfill"), tier.table("backfill")
    days = [datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=i) for i in range(4)]
    for i, day in enumerate(days):
        _write_orders(
            os.path.join(landing, day.date().isoformat()),
            day,
            files=2,
            rows_per_file=250,
            first_id=1 + i * 1000,
        )
    with airflow.logs_on_failure():
        airflow.cli(
            "backfill",
            "create",
            "--dag-id",
            dag_id,
            "--from-date",
            days[0].isoformat(),
            "--to-date",
            days[-1].isoformat(),
            "--run-backwards",
            "--max-active-runs",
            "2",
        )
        runs = airflow.wait_for(lambda: airflow.dag_runs(dag_id), 30, "the backfill's runs")
        assert [r["logical_date"] for r in runs] == days and {r["run_type"] for r in runs} == {"backfill"}
        for run in runs:
            assert airflow.wait_for_run(dag_id, run["run_id"], timeout=240) == "success"
        runs = airflow.dag_runs(dag_id)
        tis = {r["logical_date"]: airflow.task_instance(dag_id, r["run_id"], TASK) for r in runs}
        results = {r["logical_date"]: airflow.xcom_return(dag_id, r["run_id"], TASK) for r in runs}

        # Backwards: the two newest intervals started first; two at a time: their loads overlapped.
        started = sorted(runs, key=lambda r: r["start_date"])
        assert {r["logical_date"] for r in started[:2]} == set(days[2:]), started
        spans = sorted((ti["start_date"], ti["end_date"]) for ti in tis.values())
        assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), spans

        # Every interval committed its own batch once, each at its first try.
        assert {d: (r["outcome"], tis[d]["try_number"]) for d, r in results.items()} == {
            d: ("committed", 1) for d in days
        }, results
        assert len({r["batch_key"] for r in results.values()}) == len(days)
        assert sorted(key for key, _ in _committing_tries(table)) == sorted(
            r["batch_key"] for r in results.values()
        )
        _exact(table, landing)


def test_a_dag_scheduled_on_the_table_runs_after_a_load_and_reads_which_batch_arrived(tier: Tier) -> None:
    """The load declares its table as an outlet Asset and puts the batch on the asset event;
    the real scheduler runs the DAG scheduled on that Asset, which reads the batch."""
    airflow = tier.airflow
    rows = _write_orders(tier.landing("assets"), datetime(2026, 11, 20, tzinfo=UTC), 2, 40)
    run_id = "asset-load-1"
    airflow.trigger("eod_sched_asset_load", run_id, None)
    with airflow.logs_on_failure():
        assert airflow.wait_for_run("eod_sched_asset_load", run_id, timeout=240) == "success"
        loaded = airflow.xcom_return("eod_sched_asset_load", run_id, TASK)
        assert loaded["outcome"] == "committed" and loaded["rows"] == rows

        def reader_done() -> dict[str, Any] | None:
            runs = [r for r in airflow.dag_runs("eod_sched_asset_reader") if r["state"] == "success"]
            return runs[0] if runs else None

        run = airflow.wait_for(reader_done, 180, "the DAG scheduled on the table's Asset to run")
    assert run["run_type"] == "asset_triggered"
    arrived = airflow.xcom_return("eod_sched_asset_reader", run["run_id"], "which_batches")
    assert len(arrived) == 1
    got = arrived[0]
    assert (got["batch_key"], got["generation"], got["table_version"], got["rows"]) == (
        loaded["batch_key"],
        loaded["generation"],
        loaded["table_version"],
        rows,
    )
    _exact(tier.table("assets"), tier.landing("assets"))
