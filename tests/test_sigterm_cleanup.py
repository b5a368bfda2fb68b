"""A run ended by SIGTERM (CI's timeout, ``kill``) stops the PostgreSQL server it started.

``pg_ctl`` daemonizes the server, so it outlives whatever started it unless a ``finally``
block or a fixture teardown stops it, and SIGTERM's default action runs neither. Both the
long chaos runs (``benchmarks/chaos.py``) and pytest itself (``tests/conftest.py``) turn
SIGTERM into a KeyboardInterrupt so that they do.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_JDBC_JAR, REPO
from tests.postgres_server import _bindir

pytestmark = [
    pytest.mark.jdbc,
    pytest.mark.skipif(
        _bindir() is None or not os.path.exists(POSTGRES_JDBC_JAR),
        reason="PostgreSQL server binaries or its JDBC jar are not installed "
        "(apt-get install postgresql libpostgresql-jdbc-java; .ci/run installs them)",
    ),
]


def _server_dirs() -> set[str]:
    return set(glob.glob("/tmp/eod-pg-*"))


def _wait_for_new_server(before: set[str], proc: subprocess.Popen[bytes], within: float) -> tuple[str, int]:
    """The directory and postmaster pid of the first server started after ``before``."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the run ended before its server started: {proc.returncode}"
        for root in _server_dirs() - before:
            pid_file = os.path.join(root, "data", "postmaster.pid")
            try:
                with open(pid_file) as fh:
                    first = fh.readline().strip()
            except OSError:
                continue
            if first.isdigit():
                return root, int(first)
        time.sleep(0.2)
    raise AssertionError(f"no PostgreSQL server started within {within:.0f} s")


def _wait_until_ready(root: str, within: float) -> None:
    """Until the server's own database takes connections: the starter has returned it."""
    import psycopg2

    from tests.postgres_server import DATABASE, PASSWORD, USER

    with open(os.path.join(root, "data", "postmaster.pid")) as fh:
        port = int(fh.read().splitlines()[3])
    deadline = time.monotonic() + within
    while True:
        try:
            conn = psycopg2.connect(
                host="127.0.0.1", port=port, user=USER, password=PASSWORD, dbname=DATABASE
            )
            conn.close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next(line for line in fh if line.startswith("State:"))
    except (OSError, StopIteration):
        return False
    return "Z" not in state.split()[1]  # a zombie has exited; only its entry is left


def _terminate_and_check(proc: subprocess.Popen[bytes], root: str, pid: int) -> None:
    assert _alive(pid), "the server should be running before the SIGTERM"
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    try:
        assert proc.returncode != 0, "a run ended by SIGTERM must not report success"
        assert not _alive(pid), f"the PostgreSQL server (pid {pid}) outlived the SIGTERMed run"
        assert not os.path.exists(root), f"the server's directory {root} was left behind"
    finally:
        if _alive(pid):  # do not leak it into the rest of the session
            os.kill(pid, signal.SIGQUIT)


@pytest.mark.spark
@pytest.mark.chaos
@pytest.mark.parametrize("when", ["while the server starts", "while trials run"])
def test_a_sigterm_ends_a_chaos_run_and_stops_its_postgres_server(tmp_path: Path, when: str) -> None:
    before = _server_dirs()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    with open(tmp_path / "chaos.err", "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.chaos", "--trials", "50", "--per-chunk", "50", "--seed", "3"],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        root, pid = _wait_for_new_server(before, proc, within=180)
        if when == "while trials run":
            _wait_until_ready(root, within=60)
            time.sleep(3)  # into the first trial; where exactly does not matter
        _terminate_and_check(proc, root, pid)


def test_a_sigterm_ends_pytest_and_its_postgres_fixture_is_torn_down(tmp_path: Path) -> None:
    # A test that holds the session's PostgreSQL fixture until it is killed; the tests'
    # conftest is loaded as a plugin so that its fixtures and its SIGTERM handling apply.
    test_file = tmp_path / "test_holds_postgres.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import time

            def test_holds(postgres):
                time.sleep(600)
            """
        )
    )
    before = _server_dirs()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    root, pid = _wait_for_new_server(before, proc, within=120)
    _wait_until_ready(root, within=60)
    _terminate_and_check(proc, root, pid)
