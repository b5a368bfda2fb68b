"""Issue 18, items 11, 12 and 15, each pinned by a test that failed on 960f2aa.

- Item 11: a batch whose input changed after planning could be re-frozen only by a DAG that
  wired ``restate``/``restate_batch_key`` params; otherwise the DAG had to be edited and
  redeployed. Now every load operator honours ``dag_run.conf`` keys (``eod_pipeline``,
  ``eod_restate``, ``eod_restate_batch_key``), scoped to the named pipeline, and the errors
  name them.
- Item 12: one run loaded one batch. ``catch_up=True`` loads batch after batch in one task.
- Item 15: the spec of a SIGKILLed submit attempt stayed in ``_eod/specs/`` for good.

Every test that loads data ends with a row-by-row check against the source.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.airflow_exceptions import AirflowFailException
from airflow_eod.core import faults
from airflow_eod.core.ask import BatchStatus, ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError, InputChangedError
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED, NO_NEW_DATA
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from tests.conftest import REPO
from tests.support.helpers import check, load_dag_file, task_tries, txn_commits, xcom_value
from tests.support.jdbc_helpers import (
    airflow_connection,
    check_against_postgres,
    create_orders,
    insert_orders,
)

DAGS = os.path.join(REPO, "tests", "dags")
# Where submitted attempts' specs live (airflow_eod.core.spec_files.SPECS_DIR). The modules
# new with these items are imported inside the tests, so that on the base commit each test
# fails on its own behaviour rather than the whole file on an import.
SPECS_DIR = os.path.join("_eod", "specs")
ORDERS_DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


def _ctx(run_id: str, try_number: int = 1, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """What Airflow hands ``execute``: the task instance, and the run's conf."""
    ti = SimpleNamespace(dag_id="cu", task_id="load", run_id=run_id, map_index=-1, try_number=try_number)
    ctx: dict[str, Any] = {"ti": ti}
    if conf is not None:
        ctx["dag_run"] = SimpleNamespace(conf=conf)
    return ctx


def _landing_op(landing: str, table: str, pipeline: str, **kw: Any) -> Any:
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    return LandingFilesToDeltaOperator(
        task_id="load",
        landing_path=landing,
        table_uri=table,
        pipeline_id=pipeline,
        file_format="csv",
        schema=ORDERS_DDL,
        **kw,
    )


def _rewrite(directory: str, rows: int, seed: int, first_id: int = 1) -> None:
    """Rewrite the directory's first file in place with other rows (a corrected delivery)."""
    write_order_files(directory, 1, rows, first_id=first_id, seed=seed)


# -- item 11: re-freeze / restate through dag_run.conf ------------------------------------------


def test_conf_restates_only_the_named_pipeline() -> None:
    """The scoping rule: only a pipeline named by ``eod_pipeline`` reacts; a restatement that
    names none fails (never the wrong pipeline restated); malformed values are refused."""
    from airflow_eod.run_conf import restate_request

    conf = {"eod_pipeline": "p.a", "eod_restate": True, "eod_restate_batch_key": "o-00000000-x"}
    assert restate_request(conf, "p.a", False, None) == (True, "o-00000000-x")
    assert restate_request(conf, "p.b", False, None) == (False, None), "another pipeline is left alone"
    assert restate_request(conf, "p.b", True, "k") == (True, "k"), "its own params still apply"
    listed = {"eod_pipeline": ["p.a", "p.c"], "eod_restate": "true"}
    assert restate_request(listed, "p.c", False, None) == (True, None)
    assert restate_request({}, "p.a", False, None) == (False, None)
    assert restate_request({"other": 1}, "p.a", True, "k") == (True, "k")
    with pytest.raises(ConfigurationError, match="eod_pipeline"):
        restate_request({"eod_restate": True}, "p.a", False, None)
    with pytest.raises(ConfigurationError, match="eod_restate"):
        restate_request({"eod_pipeline": "p.a", "eod_restate_batch_key": "k"}, "p.a", False, None)
    with pytest.raises(ConfigurationError, match="true or false"):
        restate_request({"eod_pipeline": "p.a", "eod_restate": "maybe"}, "p.a", False, None)
    with pytest.raises(ConfigurationError, match="must name the pipeline"):
        restate_request({"eod_pipeline": 3, "eod_restate": True}, "p.a", False, None)
    for hostile in ("../../../etc/passwd", "o-1/../../x", "/abs"):
        with pytest.raises(ConfigurationError, match="is not valid"):
            restate_request({**conf, "eod_restate_batch_key": hostile}, "p.a", False, None)


@pytest.mark.spark
def test_the_changed_input_error_names_the_conf_way_out(spark: Any, tmp_path: Any) -> None:
    """On 960f2aa the error said "trigger a run with restate=True and restate_batch_key=...",
    which only works in a DAG that wired those params. It now names the dag_run.conf keys."""
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 10)
    op = _landing_op(landing, table, "cu.msg")
    frozen = op.build_source().plan(
        PlanLog(TableRef.parse(table), "cu.msg"), run_token="crashed-run", is_committed=lambda k: False
    )
    assert frozen is not None
    _rewrite(landing, 7, seed=99)
    with pytest.raises(AirflowFailException) as caught:
        op.execute(_ctx("run-1"))
    assert isinstance(caught.value.__cause__, InputChangedError)
    text = str(caught.value)
    want = f'{{"eod_pipeline": "cu.msg", "eod_restate": true, "eod_restate_batch_key": "{frozen.batch_key}"}}'
    assert want in text, text
    # The way out the message names, as written there, loads the file as it is now.
    done = op.execute(_ctx("run-2", conf=json.loads(want)))
    assert (done["outcome"], done["generation"], done["rows"]) == (COMMITTED, 1, 17), done
    # A retry (or clear) of that run, with its conf, does not restate a second time.
    again = op.execute(_ctx("run-2", 2, conf=json.loads(want)))
    assert (again["outcome"], again["generation"]) == (ALREADY_COMMITTED, 1), again
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 17, cmp.describe()


@pytest.mark.spark
def test_one_malformed_file_costs_one_failure_not_two(spark: Any, tmp_path: Any) -> None:
    """The pilot's case. On 960f2aa the malformed-record error said "Fix the files", and the
    clear after the fix failed again ("changed after it was planned"): two failures before
    the re-freeze. The error now quotes the conf that re-freezes the batch in one step."""
    from airflow_eod.core.errors import MalformedInputError

    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 5)
    bad = os.path.join(landing, sorted(os.listdir(landing))[0])
    with open(bad, "a") as fh:
        fh.write("not-a-number,ann,1.00,2026-11-01,2026-11-01T00:00:00Z\n")
    op = _landing_op(landing, table, "cu.bad")
    with pytest.raises(AirflowFailException) as caught:
        op.execute(_ctx("run-1"))
    assert isinstance(caught.value.__cause__, MalformedInputError), repr(caught.value.__cause__)
    text = str(caught.value)
    start = text.index('{"eod_pipeline"')
    conf = json.loads(text[start : text.index("}", start) + 1])
    assert conf["eod_pipeline"] == "cu.bad" and conf["eod_restate"] is True, conf
    write_order_files(landing, 1, 5)  # the bad file, fixed
    done = op.execute(_ctx("run-2", conf=conf))
    assert (done["outcome"], done["generation"], done["rows"]) == (COMMITTED, 1, 10), done
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()


@pytest.mark.airflow
@pytest.mark.spark
def test_a_run_with_conf_refreezes_a_changed_batch_without_a_dag_change(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dag.test() of a DAG with two load tasks and no restate params. Pipeline ``rf.a``'s batch
    was frozen (a crashed run), then its file was corrected: run 1 fails with
    InputChangedError. On 960f2aa a run with conf changed nothing (it failed the same way);
    the user had to edit the DAG. Now a run with ``eod_*`` conf keys re-freezes and loads it,
    and ``rf.b``, not named, does not restate its own committed batch although its file was
    rewritten too."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    table_a, table_b = str(tmp_path / "table_a"), str(tmp_path / "table_b")
    write_order_files(a, 2, 10)
    write_order_files(b, 2, 5, first_id=500)
    for name, value in (("LANDING_A", a), ("LANDING_B", b), ("TABLE_A", table_a), ("TABLE_B", table_b)):
        monkeypatch.setenv(f"EOD_TEST_RF_{name}", value)
    module = load_dag_file(os.path.join(DAGS, "eod_refreeze_test.py"))
    frozen = (
        module.dag.get_task("load_a")
        .build_source()
        .plan(PlanLog(TableRef.parse(table_a), "rf.a"), run_token="crashed-run", is_committed=lambda k: False)
    )
    assert frozen is not None
    _rewrite(a, 7, seed=99)

    run1 = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    assert str(run1.state) == "failed"
    assert task_tries(run1.run_id, "load_a") == ["failed"]
    loaded_b = xcom_value(run1.run_id, "load_b")
    assert (loaded_b["outcome"], loaded_b["rows"]) == (COMMITTED, 10)
    assert not os.path.exists(os.path.join(table_a, "_delta_log")), "nothing of rf.a was committed"
    before_b = check(table_b, b)
    assert before_b.exact, before_b.describe()
    # rf.b's committed file changes too: only a restatement of rf.b would reload it.
    _rewrite(b, 3, seed=5, first_id=500)

    conf = {"eod_pipeline": "rf.a", "eod_restate": True, "eod_restate_batch_key": frozen.batch_key}
    run2 = module.dag.test(logical_date=datetime(2026, 11, 21, tzinfo=UTC), run_conf=conf)
    assert str(run2.state) == "success"
    result_a = xcom_value(run2.run_id, "load_a")
    assert (result_a["outcome"], result_a["generation"], result_a["rows"]) == (COMMITTED, 1, 17), result_a
    assert result_a["batch_key"] == frozen.batch_key
    cmp = check(table_a, a)
    assert cmp.exact and cmp.table_rows == 17, cmp.describe()
    # rf.b was not named: nothing new for it, and its committed batch stays generation 0.
    result_b = xcom_value(run2.run_id, "load_b")
    assert result_b["outcome"] == NO_NEW_DATA, result_b
    assert ask(TableRef.parse(table_b), BatchKey("rf.b", loaded_b["batch_key"])).committed_generation == 0
    assert DeltaTable(table_b).version() == 0
    assert len(DeltaTable(table_b).to_pyarrow_table()) == 10, "rf.b's table still holds its old rows"


# -- item 12: catching up in one task ----------------------------------------------------------


def test_catch_up_is_refused_at_parse_time_where_it_cannot_work() -> None:
    """Interval boundaries, a limit without catch-up, or a limit below 1: refused when the DAG
    is parsed (on 960f2aa ``catch_up`` was an unknown argument)."""
    from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

    with pytest.raises(ConfigurationError, match="catch_up=True needs boundary='offsets'"):
        _landing_op("/l", "/t", "p", boundary="interval", catch_up=True)
    with pytest.raises(ConfigurationError, match="catch_up=True needs boundary='offsets'"):
        JdbcToDeltaOperator(
            task_id="j",
            jdbc_conn_id="c",
            source_table="s",
            key_column="ts",
            key_type="timestamp",
            boundary="interval",
            table_uri="/t",
            catch_up=True,
        )
    with pytest.raises(ConfigurationError, match="pass catch_up=True"):
        _landing_op("/l", "/t", "p", max_batches_per_run=3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError, match="max_batches_per_run"):
            _landing_op("/l", "/t", "p", catch_up=True, max_batches_per_run=bad)


@pytest.mark.spark
def test_catch_up_loads_the_backlog_in_one_task_with_one_session(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five files, two per batch: one catch-up task loads three batches (on 960f2aa one run
    loaded one batch, two files). One SparkSession serves the loop. With
    ``max_batches_per_run=2`` the next backlog takes two runs."""
    from airflow_eod.spark import session

    sessions: list[int] = []
    real = session.get_session
    monkeypatch.setattr(session, "get_session", lambda *a, **k: sessions.append(1) or real(*a, **k))
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 5, 4)
    op = _landing_op(landing, table, "cu.files", max_files_per_batch=2, catch_up=True)
    first = op.execute(_ctx("run-1"))
    assert len(sessions) == 1, "one SparkSession for the whole loop"
    assert first["batch_count"] == 3 and first["drained"] is True, first
    assert [(b["outcome"], b["rows"], b["files"] > 0) for b in first["batches"]] == [
        (COMMITTED, 8, True),
        (COMMITTED, 8, True),
        (COMMITTED, 4, True),
    ]
    assert first["batch_key"] == first["batches"][-1]["batch_key"] and first["rows"] == 4
    assert first["rows_loaded"] == 20 and first["batches_omitted"] == 0
    assert [b["table_version"] for b in first["batches"]] == [0, 1, 2]
    assert len(json.dumps(first)) < 4000, "the XCom stays small"
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()

    write_order_files(landing, 5, 3, first_id=1000)
    limited = _landing_op(
        landing, table, "cu.files", max_files_per_batch=2, catch_up=True, max_batches_per_run=2
    )
    second = limited.execute(_ctx("run-2"))
    assert (second["batch_count"], second["drained"], second["rows_loaded"]) == (2, False, 12), second
    third = limited.execute(_ctx("run-3"))
    assert (third["batch_count"], third["drained"], third["rows_loaded"]) == (1, True, 3), third
    again = limited.execute(_ctx("run-4"))
    assert (again["outcome"], again["batch_count"], again["batches"]) == (NO_NEW_DATA, 0, []), again
    assert len(txn_commits(table)) == 6 == len(set(txn_commits(table)))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 35, cmp.describe()


def test_a_long_catch_up_keeps_its_result_small() -> None:
    """However many batches a run loads, the result lists the newest 100 and counts the rest."""
    from airflow_eod.core.catch_up import CatchUpResult, batch_token, load_batches
    from airflow_eod.core.load_flow import LoadRequest
    from airflow_eod.core.result import LoadResult

    seen: list[str] = []

    def load_one(req: LoadRequest) -> LoadResult:
        seen.append(req.run_token)
        n = len(seen)
        if n > 250:
            return LoadResult("p", None, None, None, 0, 0, NO_NEW_DATA, "/t")
        return LoadResult("p", f"o-{n:08d}-x", 0, n, 10, 1, COMMITTED, "/t")

    done = load_batches(LoadRequest(table=TableRef.parse("/t"), pipeline_id="p", run_token="r"), load_one)
    assert isinstance(done, CatchUpResult) and done.drained and len(done.batches) == 250
    out = done.to_dict()
    assert (out["batch_count"], out["batches_omitted"], len(out["batches"])) == (250, 150, 100)
    assert out["batch_key"] == "o-00000250-x" and out["batches"][-1]["batch_key"] == "o-00000250-x"
    assert out["rows_loaded"] == 2500 and len(json.dumps(out)) < 20_000
    assert seen[:3] == ["r", "r#catch-up-1", "r#catch-up-2"] == [batch_token("r", i) for i in range(3)]
    assert len(set(seen)) == len(seen), "every batch of the run has its own claim token"


@pytest.mark.spark
def test_a_catch_up_task_asked_to_restate_restates_only_that_batch(spark: Any, tmp_path: Any) -> None:
    """A restating run of a catch-up task (conf keys) loads just the batch it restates: the
    backlog waits for the next run, which catches it up."""
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 4)
    op = _landing_op(landing, table, "cu.restate", max_files_per_batch=1, catch_up=True)
    first = op.execute(_ctx("run-1"))
    assert first["batch_count"] == 2, first
    key = first["batches"][0]["batch_key"]
    _rewrite(landing, 6, seed=3)  # batch 1's file corrected in place
    write_order_files(landing, 2, 4, first_id=100)  # and a backlog arrives
    conf = {"eod_pipeline": "cu.restate", "eod_restate": True, "eod_restate_batch_key": key}
    restated = op.execute(_ctx("run-2", conf=conf))
    assert (restated["batch_key"], restated["generation"], restated["rows"]) == (key, 1, 6), restated
    assert "batches" not in restated
    caught = op.execute(_ctx("run-3"))
    assert [b["rows"] for b in caught["batches"]] == [4, 4], caught
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 18, cmp.describe()


@pytest.mark.spark
@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_a_catch_up_run_that_dies_in_batch_2_resumes_on_retry(
    point: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Try 1 dies at batch 2 of 3 (``#2``: the second time it reaches the point). The retry
    finds batch 1 committed (``already_committed``), batch 2 under the key frozen by try 1
    (I3: never re-planned), loads batch 3, and every batch is committed once (I1, I2)."""
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 6, 5)
    op = _landing_op(landing, table, "cu.crash", max_files_per_batch=2, catch_up=True)
    faults.reset_counts()
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1#2")
    with pytest.raises(faults.InjectedFault):
        op.execute(_ctx("run-1", 1))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    log = PlanLog(TableRef.parse(table), "cu.crash")
    frozen_2 = log.get_offset_plan(1)
    write_order_files(landing, 1, 5, first_id=900)  # arrives between the tries
    done = op.execute(_ctx("run-1", 2))
    outcomes = [(b["batch_key"], b["outcome"]) for b in done["batches"]]
    second = COMMITTED if point == "before_commit" else ALREADY_COMMITTED
    assert [o for _, o in outcomes] == [ALREADY_COMMITTED, second, COMMITTED, COMMITTED], outcomes
    assert outcomes[1][0] == frozen_2.batch_key, "the retry loaded the batch try 1 froze"
    assert [log.get_offset_plan(i).batch_key for i in range(4)] == [k for k, _ in outcomes]
    commits = txn_commits(table)
    assert len(commits) == 4 == len({app for app, _ in commits}), commits
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 35, cmp.describe()


@pytest.mark.spark
@pytest.mark.faults
def test_two_catch_up_runs_at_once_commit_each_batch_once(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two DAG runs' catch-up tasks race over one backlog (a pause before each commit widens
    the window): they meet on the same frozen batches, and fencing lets one commit each."""
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 8, 3)
    monkeypatch.setenv("EOD_FAULTPOINTS", "before_commit=sleep:0.5")
    results: dict[str, Any] = {}

    def task(run_id: str) -> None:
        op = _landing_op(landing, table, "cu.race", max_files_per_batch=2, catch_up=True)
        try:
            results[run_id] = op.execute(_ctx(run_id))
        except BaseException as exc:  # reported below
            results[run_id] = exc

    threads = [threading.Thread(target=task, args=(r,)) for r in ("race-1", "race-2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert all(isinstance(r, dict) for r in results.values()), results
    commits = txn_commits(table)
    assert len(commits) == 4 == len({app for app, _ in commits}), commits
    log = PlanLog(TableRef.parse(table), "cu.race")
    assert log.newest_offset_seq() == 3, "four batches, no batch planned twice"
    committed_by = {}
    for run_id, result in results.items():
        for b in result["batches"]:
            if b["outcome"] == COMMITTED:
                assert b["batch_key"] not in committed_by, f"{b['batch_key']} committed twice"
                committed_by[b["batch_key"]] = run_id
    assert sorted(committed_by) == sorted(log.get_offset_plan(i).batch_key for i in range(4))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 24, cmp.describe()


@pytest.mark.airflow
@pytest.mark.airflow_current_only
@pytest.mark.spark
@pytest.mark.jdbc
def test_a_jdbc_catch_up_task_loads_1670_rows_in_two_batches(
    airflow_db: str, spark: Any, postgres: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pilot's case: ``max_rows_per_batch=1000`` and 1,670 new rows. On 960f2aa run 1
    loaded 1,000 and the rest waited for the next schedule; a catch-up task loads both."""
    source, table = "orders_cu", str(tmp_path / "table")
    postgres.execute(f"DROP TABLE IF EXISTS {source}")
    create_orders(postgres, source)
    insert_orders(postgres, source, range(1, 1671))
    monkeypatch.setenv("AIRFLOW_CONN_EOD_TEST_PG", airflow_connection(postgres))
    monkeypatch.setenv("EOD_TEST_CU_SOURCE", source)
    monkeypatch.setenv("EOD_TEST_CU_TABLE", table)
    module = load_dag_file(os.path.join(DAGS, "eod_catch_up_jdbc_test.py"))
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    assert str(run.state) == "success"
    result = xcom_value(run.run_id, "load")
    assert [(b["outcome"], b["rows"]) for b in result["batches"]] == [(COMMITTED, 1000), (COMMITTED, 670)]
    assert (result["rows"], result["rows_loaded"], result["drained"]) == (670, 1670, True), result
    cmp = check_against_postgres(postgres, source, table)
    assert cmp.exact, cmp.describe()


# -- item 15: specs of SIGKILLed submit attempts ------------------------------------------------


def test_decided_specs_go_and_every_other_file_stays(tmp_path: Any) -> None:
    """Only specs (and error files) of the decided batch at its committed generation or older
    are removed: another batch's, a newer generation's (a restatement in flight), a name that
    is not a spec, and a link are left alone."""
    from airflow_eod.core.spec_files import remove_decided_specs, spec_path

    table = str(tmp_path / "table")
    batch, other = BatchKey("p", "o-00000000-aa"), BatchKey("p", "o-00000001-bb")
    old = spec_path(TableRef.parse(table), batch, 0, "attempt0")
    mine = spec_path(TableRef.parse(table), batch, 1, "attempt1")
    newer = spec_path(TableRef.parse(table), batch, 2, "attempt2")
    theirs = spec_path(TableRef.parse(table), other, 0, "attempt3")
    outside = str(tmp_path / "outside.json")
    os.makedirs(os.path.dirname(old))
    for path in (old, mine, newer, theirs, old + ".error.json", outside):
        with open(path, "w") as fh:
            fh.write("{}")
    link = spec_path(TableRef.parse(table), batch, 0, "link")
    os.symlink(outside, link)
    with open(os.path.join(os.path.dirname(old), "notes.txt"), "w") as fh:
        fh.write("x")
    undecided = BatchStatus(batch, 1, None, None, None, None)
    assert remove_decided_specs(TableRef.parse(table), undecided) == []
    decided = BatchStatus(batch, 1, 1, 3, None, 3)
    assert sorted(remove_decided_specs(TableRef.parse(table), decided)) == sorted(
        os.path.basename(p) for p in (old, old + ".error.json", mine)
    )
    left = sorted(os.listdir(os.path.join(table, SPECS_DIR)))
    kept = [os.path.basename(p) for p in (newer, theirs, link)]
    assert left == sorted([*kept, "notes.txt"])
    assert os.path.exists(outside)


TASK_CHILD = textwrap.dedent(
    """
    import json, sys, types
    sys.path.insert(0, sys.argv[1])
    cfg = json.loads(sys.argv[2])
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
    op = LandingFilesToDeltaOperator(task_id="load", **cfg["op"])
    ti = types.SimpleNamespace(dag_id="cu", task_id="load", run_id=cfg["run_id"], map_index=-1, try_number=1)
    print("EOD_CU_RESULT " + json.dumps(op.execute({"ti": ti})), flush=True)
    """
)


@pytest.mark.spark
@pytest.mark.faults
def test_the_spec_of_a_sigkilled_submit_attempt_is_removed_when_the_retry_decides(
    spark: Any, tmp_path: Any
) -> None:
    """Try 1 submits its driver (spark-submit, master ``local[1]``), which pauses before its
    commit; the task and everything it started are SIGKILLed (a lost worker). Try 2 loads the
    batch. On 960f2aa try 1's spec stayed in ``_eod/specs/`` for good; now the retry's
    decision removes it, and the folder is empty."""
    import psutil

    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 6)
    op_kwargs = {
        "execution": "submit",
        "spark_conn_id": "cu_spark",
        "spark_conf": {"spark.pyspark.python": sys.executable},
        "landing_path": landing,
        "table_uri": table,
        "pipeline_id": "cu.spec",
        "file_format": "csv",
        "schema": ORDERS_DDL,
    }
    env = dict(
        os.environ,
        EOD_FAULTPOINTS="before_commit=sleep:120",
        AIRFLOW_CONN_CU_SPARK=json.dumps(
            {"conn_type": "spark", "host": "local[1]", "extra": {"deploy-mode": "client"}}
        ),
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    cfg = {"op": op_kwargs, "run_id": "run-1"}
    child = subprocess.Popen(
        [sys.executable, "-c", TASK_CHILD, REPO, json.dumps(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    specs = os.path.join(table, SPECS_DIR)
    staged = os.path.join(table, "eod_data", "cu.spec")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        files = [f for _, _, fs in os.walk(staged) for f in fs if f.endswith(".parquet")]
        if files and os.path.isdir(specs) and os.listdir(specs):
            break
        assert child.poll() is None, child.communicate()[0][-3000:]
        time.sleep(0.5)
    else:
        raise AssertionError("try 1's driver never staged its files")
    procs = [psutil.Process(child.pid), *psutil.Process(child.pid).children(recursive=True)]
    os.killpg(child.pid, signal.SIGKILL)  # the task, spark-submit and the driver: a lost worker
    for proc in procs:  # any that left the process group: they are ours, end them too
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    child.communicate(timeout=30)
    psutil.wait_procs(procs, timeout=30)
    assert len(os.listdir(specs)) == 1, "try 1's spec stays behind its SIGKILL"
    assert not os.path.exists(os.path.join(table, "_delta_log")), "try 1 committed nothing"

    retry = _landing_op(landing, table, "cu.spec").execute(_ctx("run-1", 2))
    assert (retry["outcome"], retry["rows"]) == (COMMITTED, 12), retry
    assert os.listdir(specs) == [], f"specs of decided attempts stay: {os.listdir(specs)}"
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()
