"""Tables on HDFS (issue 24, item 4): landing files on the worker's disk loaded into an
``hdfs://`` table on the mini cluster's HDFS, with the delta-rs engine (our commit through
the storage seam's HDFS backend) and with the Delta Spark engine (its HDFSLogStore); a crash
at each boundary of the write path, then the retry; a child SIGKILLed mid-load, then the
retry; two racing attempts of one batch. Every case ends with the row-by-row checker
(delta-rs reads the table from HDFS, the landing files from disk).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.faults import JOB_POINTS, InjectedFault
from airflow_eod.core.storage import storage_at
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, orders_source, plan_for, run_child, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.yarn, pytest.mark.faults]
ENGINES = ["delta-rs", pytest.param("delta-spark", marks=pytest.mark.delta_spark)]
# The points a try passes once its commit is in the table (core/faults.py).
COMMITTED_BY_THEN = ("before_record", "after_commit")


@pytest.fixture
def hdfs_table(mini_yarn: Any) -> str:
    """A fresh table directory on the mini cluster's HDFS (``hdfs://localhost:<port>/...``)."""
    return f"{mini_yarn.namenode}/loads/{uuid.uuid4().hex}/orders"


def _commits(table: str) -> int:
    return len(DeltaTable(table).history())


def _exact(table: str, landing: str, rows: int) -> None:
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == rows, cmp.describe()


@pytest.mark.parametrize("engine", ENGINES)
def test_landing_files_load_into_an_hdfs_table_row_by_row(
    spark: Any, landing: str, hdfs_table: str, engine: str
) -> None:
    write_order_files(landing, 2, 15)
    source = orders_source(landing, max_files_per_batch=1)
    results = [
        run_load(spark, spec_for(source, hdfs_table, plan_for(source, hdfs_table, run=r), engine=engine))
        for r in ("r0", "r1")
    ]
    assert [(r.outcome, r.rows, r.table_version) for r in results] == [
        ("committed", 15, 0),
        ("committed", 15, 1),
    ]
    _exact(hdfs_table, landing, 30)
    # The table is on HDFS and nowhere else: its log and data are listed there.
    store = storage_at(hdfs_table)
    commits = [n for n in store.list("_delta_log") if n.endswith(".json")]
    assert commits == ["00000000000000000000.json", "00000000000000000001.json"]
    # (A retry finding its batch committed: the crash tests below, from before_record on.)
    assert _commits(hdfs_table) == 2


# Every point of the delta-rs engine's path; the Delta Spark engine's own two (its write has
# no staging step, and before_write/after_commit are the job's, shared with delta-rs).
CRASHES = [("delta-rs", p) for p in JOB_POINTS] + [
    pytest.param("delta-spark", p, marks=pytest.mark.delta_spark) for p in ("before_commit", "before_record")
]


@pytest.mark.parametrize(("engine", "point"), CRASHES)
def test_a_crash_at_each_boundary_then_the_retry_commits_once(
    spark: Any, landing: str, hdfs_table: str, engine: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 1, 12)
    source = orders_source(landing)
    plan = plan_for(source, hdfs_table)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, hdfs_table, plan, try_number=1, engine=engine))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    retry = plan_for(source, hdfs_table)
    assert retry == plan
    result = run_load(spark, spec_for(source, hdfs_table, retry, try_number=2, engine=engine))
    assert result.outcome == ("already_committed" if point in COMMITTED_BY_THEN else "committed")
    assert _commits(hdfs_table) == 1 and ask(TableRef.parse(hdfs_table), plan.key).committed
    _exact(hdfs_table, landing, 12)


@pytest.mark.parametrize("point", ["before_record"])
def test_a_child_killed_at_a_boundary_then_the_retry_commits_once(
    spark: Any, landing: str, hdfs_table: str, tmp_path: Any, point: str
) -> None:
    """A real process dies (SIGKILL: no clean-up, its HDFS client's connections cut)."""
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    plan = plan_for(source, hdfs_table)
    child = run_child(spec_for(source, hdfs_table, plan, try_number=1), str(tmp_path), f"{point}=kill@1")
    out, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, out.decode()[-2000:]
    committed = ask(TableRef.parse(hdfs_table), plan.key).committed
    assert committed == (point == "before_record")
    result = run_load(spark, spec_for(source, hdfs_table, plan_for(source, hdfs_table), try_number=2))
    assert result.outcome == ("already_committed" if committed else "committed")
    assert _commits(hdfs_table) == 1
    _exact(hdfs_table, landing, 10)


@pytest.mark.parametrize("engine", ENGINES)
def test_two_racing_attempts_commit_once(
    spark: Any, landing: str, hdfs_table: str, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two attempts of one run freeze at once (one plan wins the plan log, both get it), then
    load at once, both pausing between their ask and their commit so that both have asked "no"
    before either commits: the NameNode's rename without overwrite (our commit through the
    storage seam; Delta Spark's HDFSLogStore), not the timing, picks the winner."""
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:3")
    plans: dict[int, Any] = {}
    outcomes: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=120)

    def attempt(n: int) -> None:
        try:
            barrier.wait()
            plans[n] = plan_for(source, hdfs_table)
            barrier.wait()
            spec = spec_for(source, hdfs_table, plans[n], try_number=n + 1, engine=engine)
            outcomes.append(run_load(spark, spec).outcome)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert plans[0] == plans[1]
    assert sorted(outcomes) == ["already_committed", "committed"], outcomes
    assert _commits(hdfs_table) == 1
    _exact(hdfs_table, landing, 10)


_RACER = """
import sys
from airflow_eod.core.storage import put_settled, storage_at
attempt = "racer " + sys.argv[2]
won = put_settled(storage_at(sys.argv[1]), "_delta_log/0.json", attempt.encode(), attempt=attempt)
sys.stdout.write("won" if won else "lost")
"""


def test_processes_racing_put_if_absent_exactly_one_wins(mini_yarn: Any) -> None:
    """Separate processes (separate HDFS clients) race one put-if-absent: one wins, and the
    file holds the winner's bytes whole."""
    root = f"{mini_yarn.namenode}/race/{uuid.uuid4().hex}"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    )
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, root, str(n)], stdout=subprocess.PIPE, env=env)
        for n in range(6)
    ]
    said = [p.communicate(timeout=120)[0].decode() for p in racers]
    assert all(p.returncode == 0 for p in racers)
    assert sorted(said) == ["lost"] * 5 + ["won"], said
    winner = said.index("won")
    assert storage_at(root).get("_delta_log/0.json") == f"racer {winner}".encode()


def test_hdfs_refusals_name_the_cause(mini_yarn: Any, tmp_path: Any) -> None:
    """What this release does not do on HDFS is refused before anything is written."""
    from airflow_eod.core.options import check_object_store_load

    ref = TableRef.parse(f"{mini_yarn.namenode}/refused/t")
    check_object_store_load(ref, engine="delta-rs", execution="submit", quarantine=None)  # allowed
    check_object_store_load(ref, engine="delta-spark", execution="local", quarantine=None)  # allowed
    with pytest.raises(ConfigurationError, match="unknown HDFS storage option 'AWS_REGION'"):
        storage_at(f"{mini_yarn.namenode}/refused/t", {"AWS_REGION": "x"})
    with pytest.raises(ConfigurationError, match="landing files on hdfs:// are not read"):
        orders_source(f"{mini_yarn.namenode}/landing")
