"""A test or benchmark process that dies without cleaning up (SIGKILL, SIGTERM, a CI timeout)
leaves no PostgreSQL server, Spark master or worker behind: the watcher of tests/support/reaper.py
stops them. Each test starts the process that dies in a child, with its own directory for
the servers (``EOD_PG_ROOT``), so it cannot mistake another run's server for its own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_JDBC_JAR, REPO
from tests.support.postgres_server import _bindir
from tests.support.reaper import watch

needs_postgres = pytest.mark.skipif(
    _bindir() is None or not os.path.exists(POSTGRES_JDBC_JAR),
    reason="PostgreSQL server binaries or its JDBC jar are not installed "
    "(apt-get install postgresql libpostgresql-jdbc-java; .ci/run installs them)",
)


@pytest.fixture
def pg_root() -> Iterator[str]:
    # Short, under /tmp: the server's Unix socket lives in it (a 107-byte limit).
    root = tempfile.mkdtemp(prefix="eod-r-", dir="/tmp")
    os.chmod(root, 0o755)
    yield root
    for pid, _ in _processes_mentioning(root):  # only if a test failed and left one
        _kill_quietly(pid)
    shutil.rmtree(root, ignore_errors=True)


def _processes_mentioning(text: str) -> list[tuple[int, str]]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue  # exited; only its entry is left
        except OSError:
            continue
        if text in cmdline:
            found.append((int(pid), cmdline))
    return found


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_for(
    what: str, check: object, proc: subprocess.Popen[bytes] | None, within: float, every: float = 0.1
) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the child ended ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f} s: {what}")
        time.sleep(every)


def _servers_under(root: str) -> list[str]:
    return [d for d in os.listdir(root) if d.startswith("eod-pg-")]


def _assert_cleaned_up(root: str, within: float = 150) -> None:
    """No process still names ``root`` (initdb, pg_ctl, the server) and nothing is left in it."""
    deadline = time.monotonic() + within
    while _processes_mentioning(root + "/") or _servers_under(root):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"left behind after the child died: processes {_processes_mentioning(root + '/')}, "
                f"directories {_servers_under(root)}"
            )
        time.sleep(0.2)


def _child(code: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=REPO,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **env},
            stdout=err,
            stderr=subprocess.STDOUT,
        )


def test_a_watcher_released_by_its_starter_does_nothing_and_one_whose_starter_died_acts(
    tmp_path: Path,
) -> None:
    kept, removed = tmp_path / "kept", tmp_path / "removed"
    kept.mkdir()
    removed.mkdir()
    reaper = watch([{"rmtree": str(kept)}])
    reaper.release()
    assert reaper.proc.returncode == 0, "a released watcher exits at once"
    assert kept.exists(), "a released watcher must not act"
    # A starter that exits without releasing: its watcher acts.
    proc = _child(
        f"""
        import os
        from tests.support.reaper import watch
        watch([{{"rmtree": {str(removed)!r}}}])
        os._exit(0)
        """,
        {},
        tmp_path / "child.log",
    )
    assert proc.wait(timeout=60) == 0, (tmp_path / "child.log").read_text()
    _wait_for("the watcher to remove the directory", lambda: not removed.exists(), None, within=60)


def test_a_forked_child_of_the_starter_does_not_keep_its_watcher_waiting(tmp_path: Path) -> None:
    # OpenLineage's listener forks a process pool during dag.test(); such a child outlives
    # its parent and, unless it closed them, holds the watchers' write ends open.
    removed = tmp_path / "removed"
    removed.mkdir()
    log = tmp_path / "child.log"
    proc = _child(
        f"""
        import os, sys, time
        from tests.support.reaper import watch
        watch([{{"rmtree": {str(removed)!r}}}])
        pid = os.fork()
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        print("forked", pid, flush=True)
        os._exit(0)
        """,
        {},
        log,
    )
    forked = 0
    try:
        assert proc.wait(timeout=60) == 0, log.read_text()
        forked = int(log.read_text().split("forked ", 1)[1].split()[0])
        _wait_for("the watcher to remove the directory", lambda: not removed.exists(), None, within=60)
        assert _alive(forked), "the forked child should still be running while the watcher acts"
    finally:
        if forked:
            _kill_quietly(forked)


def test_a_watcher_kills_a_process_only_if_it_is_the_one_it_was_given() -> None:
    from tests.support.reaper import _run, _with_start_time

    victims = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
    try:
        reused, ours = victims
        # As if ``reused``'s pid had been freed and handed to a new process since the watch.
        stale = {**_with_start_time({"kill_tree": reused.pid}), "start_time": 1.0}
        _run([stale, {**_with_start_time({"kill_group": reused.pid}), "start_time": 1.0}])
        assert reused.poll() is None, "a process that only reuses the pid must be left alone"
        _run([_with_start_time({"kill_tree": ours.pid})])
        # psutil has reaped it (it is our child), so Popen's return code says nothing here.
        assert not _alive(ours.pid), "the process the watcher was given must be killed"
    finally:
        for victim in victims:
            victim.kill()
            victim.wait()


@needs_postgres
@pytest.mark.jdbc
@pytest.mark.parametrize(
    "when",
    [
        pytest.param("initdb", id="killed-while-initdb-runs"),
        pytest.param("pg_ctl", id="killed-while-pg_ctl-starts-the-server"),
        pytest.param("running", id="killed-while-the-server-runs"),
    ],
)
def test_a_killed_starter_leaves_no_postgres_server(pg_root: str, tmp_path: Path, when: str) -> None:
    log = tmp_path / "child.log"
    proc = _child(
        """
        import time
        from tests.support.postgres_server import PostgresServer
        PostgresServer.start()
        print("up", flush=True)
        time.sleep(600)
        """,
        {"EOD_PG_ROOT": pg_root},
        log,
    )
    try:
        if when in ("initdb", "pg_ctl"):
            # Either is a child of the starter that lives on after it; the watcher must wait
            # for it, or the server it brings up comes up after the watcher's stop.
            _wait_for(
                f"{when} to run",
                lambda: any(f"/{when} " in cmd for _, cmd in _processes_mentioning(pg_root + "/")),
                proc,
                within=60,
                every=0.005,
            )
        else:
            _wait_for("the server to be up", lambda: b"up" in log.read_bytes(), proc, within=120)
            assert _processes_mentioning(pg_root + "/"), "the server should be running"
        proc.kill()
        proc.wait(timeout=30)
        _assert_cleaned_up(pg_root)
    finally:
        if proc.poll() is None:
            proc.kill()


@needs_postgres
@pytest.mark.spark
@pytest.mark.chaos
@pytest.mark.jdbc
def test_a_sigtermed_chaos_run_leaves_no_postgres_server(pg_root: str, tmp_path: Path) -> None:
    with open(tmp_path / "chaos.log", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.chaos", "--trials", "50", "--per-chunk", "50", "--seed", "3"],
            cwd=REPO,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "EOD_PG_ROOT": pg_root},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        _wait_for("the chaos run's server", lambda: _processes_mentioning(pg_root + "/"), proc, within=180)
        time.sleep(3)  # into the trials; exactly where does not matter
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.returncode != 0, "a SIGTERMed run must not report success"
        _assert_cleaned_up(pg_root)
    finally:
        if proc.poll() is None:
            proc.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.cluster
def test_a_killed_starter_leaves_no_spark_master_or_worker(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    proc = _child(
        """
        import time
        from tests.support.spark_cluster import SparkStandalone
        cluster = SparkStandalone().start()
        print("up", cluster.root, *(p.pid for p in cluster.processes.values()), flush=True)
        time.sleep(600)
        """,
        {},
        log,
    )
    pids: list[int] = []
    try:
        _wait_for("the cluster to be up", lambda: b"up " in log.read_bytes(), proc, within=180)
        root, *rest = log.read_text().split("up ", 1)[1].split()
        pids = [int(p) for p in rest]
        assert len(pids) == 2 and all(_alive(p) for p in pids), "the master and the worker should run"
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 120
        while any(_alive(p) for p in pids) or os.path.exists(root):
            assert time.monotonic() < deadline, (
                f"left behind after the child died: alive {[p for p in pids if _alive(p)]}, "
                f"{root} exists: {os.path.exists(root)}"
            )
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids:
            if _alive(pid):
                _kill_quietly(pid)
