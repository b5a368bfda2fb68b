"""Adversary of issue 24 (YARN): a re-attempted driver's id, the kill of a cluster-mode
application, and where a cluster-mode driver's credentials go."""

from __future__ import annotations

import os
from typing import Any

import pytest

# The adversary's reproduction of finding 1 (a killed cluster-mode JDBC load left the
# source's password on HDFS, in .sparkStaging/<app>/__spark_conf__.zip) became
# the on_kill test of tests/yarn/test_yarn_submit.py (one YARN application fewer in CI);
# the unit tests of the fix are below.


def _batch() -> Any:
    from airflow_eod.core.batch import BatchKey

    return BatchKey("tests.adv24", "i-20261102T000000Z-20261103T000000Z")


def _frozen(batch: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(plan=SimpleNamespace(key=batch, generation=0))


def test_a_rerun_that_commits_keeps_its_own_files_and_removes_the_dead_runs(tmp_path: Any) -> None:
    """YARN's second run of attempt X (X.r2) stages beside the dead run's g0-X and commits:
    the settle step keeps g0-X.r2 (the committed files) and removes g0-X; the task that
    submitted X takes the commit for its own; the dead run, were it a zombie that goes on to
    commit, loses to the table (one commit)."""
    import pyarrow as pa

    from airflow_eod.core.ask import ask
    from airflow_eod.core.attempt import rerun_attempt_id
    from airflow_eod.core.load_commit import commit_batch
    from airflow_eod.core.load_flow import decide_submitted
    from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED
    from airflow_eod.core.settle import settle_committed
    from airflow_eod.core.table_layout import batch_dir
    from airflow_eod.core.table_ref import TableRef
    from tests.support.helpers import stage_data

    table = str(tmp_path / "t")
    ref, batch = TableRef.parse(table), _batch()
    first = "0123456789abcdef"
    rerun = rerun_attempt_id(first, 2)
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    dead = stage_data(table, batch, rows, attempt=first)
    again = stage_data(table, batch, rows, attempt=rerun)
    ours, status = commit_batch(ref, batch, 0, *again)
    assert ours and status.manifest is not None and status.manifest.attempt_id == rerun
    settle_committed(ref, status)
    left = sorted(os.listdir(os.path.join(table, batch_dir(batch))))
    assert left == [f"g0-{rerun}"], left

    result, _ = decide_submitted(ref, _frozen(batch), first, None)
    assert result.outcome == COMMITTED
    # Another try of the task (its own id) finds the batch committed by someone else.
    assert decide_submitted(ref, _frozen(batch), "fedcba9876543210", None)[0].outcome == ALREADY_COMMITTED

    # The first run as a zombie: its files were removed, it commits its manifest anyway.
    from airflow_eod.core.errors import BatchError

    try:
        zombie_ours, _after = commit_batch(ref, batch, 0, *dead)
        assert not zombie_ours
    except BatchError as exc:  # its staged files are gone: refused (the driver then asks the table)
        assert "gone before their commit" in exc.cause
    assert ask(ref, batch).table_version == status.table_version, "one commit"
    assert sorted(os.listdir(os.path.join(table, batch_dir(batch)))) == [f"g0-{rerun}"]


class _Hook:
    """What SparkSubmit.on_kill reads of SparkSubmitHook: the application id, the hook's own
    kill (it runs ``yarn application -kill <id>`` when it has an id, as the provider does)."""

    def __init__(self, app: str | None) -> None:
        self._yarn_application_id = app
        self._env: dict[str, str] | None = None
        self._connection: dict[str, Any] = {}
        self.ran: list[list[str]] = []

    def on_kill(self) -> None:
        import subprocess

        if self._yarn_application_id:
            cmd = ["yarn", "application", "-kill", self._yarn_application_id]
            self.ran.append(cmd)
            subprocess.run(cmd, capture_output=True, check=False)


def test_on_kill_kills_the_application_when_the_yarn_on_path_is_nodes_package_manager(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker image with Node.js tooling has ``yarn`` on PATH: the JavaScript package manager,
    not Hadoop's. ``yarn application -kill <id>`` then fails ("Command "application" not
    found"), and the cluster-mode driver loads on after the task was stopped: on_kill must
    still kill the YARN application (YARN's ApplicationCLI, as without a ``yarn``)."""
    import airflow_eod.hooks.spark_submit as spark_submit

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node_yarn = bin_dir / "yarn"
    node_yarn.write_text("#!/bin/sh\necho 'error Command \"application\" not found.' >&2\nexit 1\n")
    node_yarn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    killed: list[str] = []
    monkeypatch.setattr(
        spark_submit, "kill_yarn_application", lambda app, env=None: killed.append(app) or True
    )
    submit = object.__new__(spark_submit.SparkSubmit)
    hook = _Hook("application_1764200000000_0007")
    submit._hook = hook
    submit.on_kill()
    assert killed == ["application_1764200000000_0007"], (
        f"the hook ran {hook.ran} (Node's yarn: exit 1) and the YARN application was not killed"
    )


def test_the_kill_uses_hadoops_yarn_command_when_there_is_one(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with Hadoop's client installed (``yarn`` beside ``hadoop``) kills with it."""
    import airflow_eod.hooks.spark_submit as spark_submit

    bin_dir = tmp_path / "hadoop" / "bin"
    bin_dir.mkdir(parents=True)
    said = tmp_path / "yarn-args"
    (bin_dir / "yarn").write_text(f'#!/bin/sh\necho "$@" > {said}\n')
    (bin_dir / "hadoop").write_text("#!/bin/sh\nexit 0\n")
    for name in ("yarn", "hadoop"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert spark_submit.hadoop_yarn_command()
    assert spark_submit.kill_yarn_application("application_1764200000000_0008")
    assert said.read_text().split() == ["application", "-kill", "application_1764200000000_0008"]


def test_on_kill_kills_the_application_before_spark_submit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The application is killed while spark-submit still watches it (spark-submit then removes
    the staging directory that holds the driver's secrets), and spark-submit ends after."""
    import subprocess
    import sys

    import airflow_eod.hooks.spark_submit as spark_submit

    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    alive_at_kill: list[bool] = []

    def kill(app: str, env: Any = None) -> bool:
        alive_at_kill.append(process.poll() is None)
        process.terminate()  # what spark-submit does when it sees its application KILLED
        return True

    monkeypatch.setattr(spark_submit, "kill_yarn_application", kill)
    submit = object.__new__(spark_submit.SparkSubmit)
    hook = _Hook("application_1764200000000_0009")
    hook._submit_sp = process  # type: ignore[attr-defined]
    submit._hook = hook
    try:
        submit.on_kill()
    finally:
        process.kill()
        process.wait()
    assert alive_at_kill == [True], "the application was killed after spark-submit"
    assert hook.ran == [], "the hook did not kill the application again"
    assert hook._yarn_application_id == "application_1764200000000_0009"


def test_a_point_armed_once_does_nothing_without_the_testing_switch(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``^PATH`` on a production worker (EOD_FAULTPOINTS copied from a test set-up, no
    EOD_FAULTPOINTS_TESTING=1): the point neither fires nor creates PATH."""
    from airflow_eod.core import faults
    from airflow_eod.core.attempt import attempt

    marker = tmp_path / "fired"
    monkeypatch.delenv(faults.TESTING_SWITCH, raising=False)
    monkeypatch.setenv(faults.ENV_VAR, f"before_commit=kill^{marker},after_commit=raise#1^{marker}")
    with attempt(1):
        faults.fault_point("before_commit")
        faults.fault_point("after_commit")
    assert not marker.exists()


@pytest.mark.spark
def test_a_zombie_first_run_and_yarns_rerun_of_the_same_spec_race_into_one_commit(tmp_path: Any) -> None:
    """The race of a YARN re-attempt whose first attempt is still alive (its NodeManager was
    lost, not the process): two drivers of the same spec, one as X and one as X.r2 (as the
    driver rewrites it), both past their staging when either commits. One commit; the task
    that submitted X takes it for its own; only the committed attempt's directory is left."""
    import dataclasses
    import json

    from airflow_eod.core.attempt import rerun_attempt_id
    from airflow_eod.core.load_flow import decide_submitted
    from airflow_eod.core.result import COMMITTED
    from airflow_eod.core.table_layout import batch_dir
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.examples.sample_data import write_order_files
    from tests.support.dag_children import batch_commits
    from tests.support.helpers import check, lost_races, orders_source, plan_for, run_child, spec_for

    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 10)
    source = orders_source(landing)
    plan = plan_for(source, table)
    first = "0123456789abcdef"
    spec = spec_for(source, table, plan, attempt_id=first)
    rerun = dataclasses.replace(spec, attempt_id=rerun_attempt_id(first, 2))
    env = {"EOD_FAULTPOINTS_TESTING": "1", "SPARK_LOCAL_IP": "127.0.0.1"}
    procs = [
        run_child(s, str(tmp_path), "before_commit=sleep:8", name, env=env)
        for s, name in ((spec, "first"), (rerun, "rerun"))
    ]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(tmp_path / f"{n}-result.json")) for n in ("first", "rerun")]
    print("first run, re-run:", [r["outcome"] for r in results])
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    assert sum(lost_races(o) for o in outs) >= 1, "they did not race"
    assert len(batch_commits(table)) == 1
    result, status = decide_submitted(TableRef.parse(table), _frozen(plan.key), first, None)
    assert result.outcome == COMMITTED
    assert status.manifest is not None
    left = os.listdir(os.path.join(table, batch_dir(plan.key)))
    assert left == [f"g0-{status.manifest.attempt_id}"], left
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


def test_spark_redacts_the_storage_options_only_when_the_driver_gets_them() -> None:
    """``EOD_STORAGE_OPTIONS`` joins ``spark.redaction.regex`` (Spark's default, or the DAG's
    own) when the driver gets the table's storage options; otherwise the conf is left alone,
    since the hook masks its logged command from a value naming ``password`` onwards and the
    task log then lost ``--jars`` (found by the cluster tier's JDBC test)."""
    from airflow_eod.runners.submit import SPARK_REDACTION_DEFAULT, with_secrets_redacted

    plain = {"spark.executor.memory": "1g"}
    assert with_secrets_redacted(plain, {"EOD_SOURCE_PASSWORD": "x"}) == plain
    redacted = with_secrets_redacted(plain, {"EOD_STORAGE_OPTIONS": "{}"})
    assert redacted["spark.redaction.regex"] == SPARK_REDACTION_DEFAULT + "|EOD_STORAGE_OPTIONS"
    own = with_secrets_redacted({"spark.redaction.regex": "(?i)mine"}, {"EOD_STORAGE_OPTIONS": "{}"})
    assert own["spark.redaction.regex"] == "(?i)mine|EOD_STORAGE_OPTIONS"
