"""A real, PostgreSQL-backed Airflow 3 for the `scheduler` tier: start it, drive it, stop it.

:class:`AirflowServices` starts a throwaway PostgreSQL server (:mod:`tests.support.postgres_server`)
as the metadata DB, migrates it with ``airflow db migrate``, and runs ``airflow scheduler``
(LocalExecutor), ``airflow dag-processor`` and ``airflow api-server`` as subprocesses in their
own ``AIRFLOW_HOME``, everything on 127.0.0.1. Tests drive it with the ``airflow`` CLI and
read task-instance states and XComs straight from the metadata DB.

What runs is exposed as data, so that another test can hold ``docker-compose.yaml`` to it:

- :data:`AIRFLOW_SERVICE_COMMANDS`: each service's argv after ``airflow``;
- :data:`AIRFLOW_SETTINGS`: the ``AIRFLOW__*`` settings a deployment needs. Values with
  ``{placeholders}`` differ per deployment (:data:`SETTING_PLACEHOLDERS` says what each one
  is); the others are fixed;
- :data:`TEST_ONLY_SETTINGS`: shorter intervals, which only this tier needs.

Values are filled with :func:`render`. Every process also gets ``SPARK_LOCAL_IP=127.0.0.1``
and ``PYTHONPATH`` with the repository root (DAGs refer to ``tests.*`` modules).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import pytest

from tests.support.loopback import free_port
from tests.support.postgres_server import PostgresServer, _bindir
from tests.support.reaper import Reaper, kill_tree, watch

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AIRFLOW_BIN = os.path.join(os.path.dirname(sys.executable), "airflow")
HOST = "127.0.0.1"
API_USER = "admin"  # the simple auth manager's default user, an admin
METADATA_DB = "airflow"

# argv after `airflow`, one entry per long-running service. `{api_port}` is the api-server's
# port. The scheduler skips its log server: it would bind a fixed port (8793) on every
# address, and every component here reads task logs from the shared AIRFLOW_HOME anyway.
# No triggerer: nothing in this tier defers.
AIRFLOW_SERVICE_COMMANDS: dict[str, list[str]] = {
    "api-server": ["api-server", "--host", HOST, "--port", "{api_port}", "--workers", "1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}

# What each placeholder in the settings and commands below stands for.
SETTING_PLACEHOLDERS: dict[str, str] = {
    "db_user": "the metadata DB's user",
    "db_password": "its password",
    "db_host": "the PostgreSQL host (127.0.0.1 here)",
    "db_port": "the PostgreSQL port",
    "db_name": "the metadata database",
    "api_host": "the host tasks reach the api-server at (127.0.0.1 here)",
    "api_port": "the api-server's port",
    "jwt_secret": "one random secret shared by every component (scheduler signs, api-server checks)",
    "dags_folder": "the DAG files",
    "passwords_file": "the simple auth manager's users and passwords (JSON), for the REST API",
    "airflow_home": "AIRFLOW_HOME",
}

# The settings a LocalExecutor deployment on PostgreSQL needs, in every component's environment.
AIRFLOW_SETTINGS: dict[str, str] = {
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__DAGS_FOLDER": "{dags_folder}",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": (
        "postgresql+psycopg2://{db_user}:{db_password}@{db_host}:{db_port}/{db_name}"
    ),
    # Task processes talk to the metadata DB only through the api-server's execution API.
    "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://{api_host}:{api_port}/execution/",
    # The scheduler signs each task's token and the api-server checks it: one secret for both.
    "AIRFLOW__API_AUTH__JWT_SECRET": "{jwt_secret}",
    # REST API users' passwords from a file the deployment writes, not generated (and only
    # printed to a log) at the api-server's first start.
    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": "{passwords_file}",
}

# Only for this tier, not needed by a deployment: shorter intervals than Airflow's defaults
# to keep it fast, and bundle storage inside the throwaway home. Paused-at-creation is off so
# that a test's trigger or backfill runs at once (the interval DAGs end in the past, so the
# scheduler starts no run of its own).
TEST_ONLY_SETTINGS: dict[str, str] = {
    "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
    "AIRFLOW__CORE__PARALLELISM": "4",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
    "AIRFLOW__DAG_PROCESSOR__BUNDLE_REFRESH_CHECK_INTERVAL": "1",
    "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
    "AIRFLOW__DAG_PROCESSOR__PRINT_STATS_INTERVAL": "0",
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_STORAGE_PATH": "{airflow_home}/bundles",
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
}

T = TypeVar("T")


def render(template: str, values: Mapping[str, object]) -> str:
    """Fill a setting or argv template's ``{placeholders}``."""
    return template.format_map(dict(values))


def _tail(path: str, lines: int) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


@dataclass
class AirflowServices:
    """A running Airflow (scheduler, dag-processor, api-server) on its own PostgreSQL DB.

    Use :meth:`start` (or the class as a context manager through :func:`running_airflow`),
    then :meth:`stop`, which ends every process it started, even after a failure.
    """

    root: str
    postgres: PostgresServer
    api_port: int
    env: dict[str, str]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _log_files: dict[str, IO[bytes]] = field(default_factory=dict)
    _reapers: list[Reaper] = field(default_factory=list)
    _jwt_secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    _admin_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    _token: str | None = None

    # -- life cycle ------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        dag_files: Iterable[str],
        extra_env: Mapping[str, str] | None = None,
        *,
        timeout: float = 120.0,
    ) -> AirflowServices:
        """Start PostgreSQL and Airflow with a DAGs folder holding only ``dag_files``.

        Skips when the PostgreSQL server binaries are missing (fails instead when
        ``EOD_REQUIRE_POSTGRES`` is set), like the `jdbc` tier.

        :param dag_files: DAG files, linked into the throwaway DAGs folder.
        :param extra_env: more environment for every process (e.g. the DAGs' paths).
        :param timeout: seconds to wait for the services to be healthy and the DAGs parsed.
        """
        if _bindir() is None:
            reason = (
                "PostgreSQL server binaries are not installed (apt-get install postgresql "
                "libpostgresql-jdbc-java; .ci/run installs them): the scheduler tier runs Airflow "
                "on a real PostgreSQL metadata DB"
            )
            if os.environ.get("EOD_REQUIRE_POSTGRES"):
                pytest.fail(reason)
            pytest.skip(reason)
        root = tempfile.mkdtemp(prefix="eod-airflow-sched-")
        # Its airflow.cfg, passwords and logs go even if this process dies without stop().
        root_reaper = watch([{"rmtree": root}])
        try:
            postgres = PostgresServer.start()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            root_reaper.release()
            raise
        try:
            conn = postgres.connect("postgres")
            conn.autocommit = True  # CREATE DATABASE cannot run in a transaction block
            try:
                conn.cursor().execute(f"CREATE DATABASE {METADATA_DB}")
            finally:
                conn.close()
            services = cls(root, postgres, free_port(), {}, _reapers=[root_reaper])
        except BaseException:
            postgres.stop()
            shutil.rmtree(root, ignore_errors=True)
            root_reaper.release()
            raise
        try:
            services._prepare(dag_files, extra_env or {})
            services.cli("db", "migrate", timeout=180)
            for name in AIRFLOW_SERVICE_COMMANDS:
                services._spawn(name)
            services.wait_healthy(timeout)
        except BaseException as exc:
            services.print_logs(f"Airflow did not start: {exc!r}")
            services.stop()
            raise
        return services

    @property
    def home(self) -> str:
        return os.path.join(self.root, "home")

    @property
    def dags_folder(self) -> str:
        return os.path.join(self.home, "dags")

    @property
    def placeholders(self) -> dict[str, str]:
        """This deployment's values of :data:`SETTING_PLACEHOLDERS`."""
        return {
            "db_user": self.postgres.user,
            "db_password": self.postgres.password,
            "db_host": self.postgres.host,
            "db_port": str(self.postgres.port),
            "db_name": METADATA_DB,
            "api_host": HOST,
            "api_port": str(self.api_port),
            "jwt_secret": self._jwt_secret,
            "dags_folder": self.dags_folder,
            "passwords_file": os.path.join(self.home, "passwords.json"),
            "airflow_home": self.home,
        }

    def _prepare(self, dag_files: Iterable[str], extra_env: Mapping[str, str]) -> None:
        os.makedirs(self.dags_folder)
        os.makedirs(os.path.join(self.root, "service-logs"))
        for path in dag_files:
            os.symlink(os.path.abspath(path), os.path.join(self.dags_folder, os.path.basename(path)))
        with open(self.placeholders["passwords_file"], "w") as fh:
            json.dump({API_USER: self._admin_password}, fh)
        # Nothing of the caller's Airflow set-up leaks in (conftest points AIRFLOW_HOME and
        # the DAGs folder at the SQLite home of the dag.test() tiers).
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.pop("EOD_FAULTPOINTS", None)
        venv_bin = os.path.dirname(sys.executable)
        env.update(
            AIRFLOW_HOME=self.home,
            PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")])),
            SPARK_LOCAL_IP=HOST,
            # Spark's Python workers (a transform's UDFs) must have pyspark and pyarrow: the
            # task's own interpreter, not whatever `python3` is first on PATH.
            PYSPARK_PYTHON=sys.executable,
            PYTHONUNBUFFERED="1",
        )
        values = self.placeholders
        for settings in (AIRFLOW_SETTINGS, TEST_ONLY_SETTINGS):
            env.update({k: render(v, values) for k, v in settings.items()})
        env.update(extra_env)
        self.env = env

    def _spawn(self, name: str) -> None:
        argv = [render(a, self.placeholders) for a in AIRFLOW_SERVICE_COMMANDS[name]]
        log = open(os.path.join(self.root, "service-logs", f"{name}.log"), "ab")
        self._log_files[name] = log
        self.processes[name] = subprocess.Popen(
            [AIRFLOW_BIN, *argv],
            env=self.env,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # signals of the test run's terminal do not reach it
        )
        # Its own session outlives a test run that dies without stop(): the watcher ends it.
        self._reapers.append(watch([{"kill_tree": self.processes[name].pid}]))

    def stop(self) -> None:
        """End every process this started (and their children), then PostgreSQL."""
        for proc in self.processes.values():
            kill_tree(proc.pid, grace=15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for log in self._log_files.values():
            log.close()
        self.postgres.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        for reaper in self._reapers:
            reaper.release()
        self._reapers.clear()

    # -- health ----------------------------------------------------------------------
    def check_alive(self) -> None:
        """Fail at once when a service died (rather than waiting out a timeout)."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise AssertionError(f"airflow {name} exited with code {proc.returncode}")

    def health(self) -> dict[str, Any]:
        url = f"http://{HOST}:{self.api_port}/api/v2/monitor/health"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())  # type: ignore[no-any-return]

    def wait_healthy(self, timeout: float) -> None:
        """Until the api-server answers and sees the scheduler's and dag-processor's heartbeats."""

        def healthy() -> bool:
            try:
                report = self.health()
            except (OSError, urllib.error.URLError, ValueError):
                return False
            return all(
                report.get(part, {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "dag_processor")
            )

        self.wait_for(healthy, timeout, "the api-server, scheduler and dag-processor to be healthy")

    def wait_for(self, probe: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
        """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)

    # -- driving it ------------------------------------------------------------------
    def cli(self, *args: str, timeout: float = 120) -> str:
        """Run ``airflow <args>`` against this deployment; its output, or an error that shows it."""
        proc = subprocess.run(
            [AIRFLOW_BIN, *args],
            env=self.env,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        out = proc.stdout.decode(errors="replace")
        if proc.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} exited {proc.returncode}:\n{out[-4000:]}")
        return out

    def api(self, method: str, path: str, body: object = None) -> Any:
        """Call the public REST API (``/api/v2/...``) as the admin user; the decoded JSON answer."""
        base = f"http://{HOST}:{self.api_port}"
        if self._token is None:
            login = {"username": API_USER, "password": self._admin_password}
            self._token = str(self._request(f"{base}/auth/token", "POST", login)["access_token"])
        return self._request(f"{base}{path}", method, body, {"Authorization": f"Bearer {self._token}"})

    @staticmethod
    def _request(url: str, method: str, body: object, headers: Mapping[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"{method} {url}: HTTP {exc.code}: {exc.read().decode(errors='replace')}"
            ) from exc

    def trigger(self, dag_id: str, run_id: str, logical_date: str | None) -> dict[str, Any]:
        """Trigger a run through the REST API, as the UI does.

        Not ``airflow dags trigger --logical-date``: Airflow 3.3's CLI infers the run's data
        interval from the time of the trigger, not from the logical date it is given (the REST
        API infers it from the logical date).
        """
        return self.api(  # type: ignore[no-any-return]
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": logical_date}
        )

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of a query on the metadata DB."""
        conn = self.postgres.connect(METADATA_DB)
        try:
            with conn, conn.cursor() as cur:
                cur.execute(sql, params)
                return [tuple(r) for r in cur.fetchall()]
        finally:
            conn.close()

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float = 90) -> None:
        """Until the dag-processor has serialized every DAG (the scheduler runs only those)."""
        wanted = set(dag_ids)

        def parsed() -> bool:
            rows = self.query(
                "SELECT d.dag_id FROM dag d JOIN serialized_dag s ON s.dag_id = d.dag_id "
                "WHERE NOT d.is_stale AND d.dag_id = ANY(%s)",
                (list(wanted),),
            )
            return {r[0] for r in rows} == wanted

        self.wait_for(parsed, timeout, f"the DAGs {sorted(wanted)} to be parsed")

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """The DAG's runs, oldest logical date first."""
        cols = ("run_id", "state", "logical_date", "start_date", "end_date", "run_type", "backfill_id")
        rows = self.query(
            f"SELECT {', '.join(cols)} FROM dag_run WHERE dag_id = %s ORDER BY logical_date",
            (dag_id,),
        )
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def run_state(self, dag_id: str, run_id: str) -> str | None:
        rows = self.query("SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        return rows[0][0] if rows else None

    def wait_for_run(
        self, dag_id: str, run_id: str, timeout: float = 180, states: Iterable[str] = ("success", "failed")
    ) -> str:
        """Until the DAG run reaches one of ``states``; that state."""
        wanted = set(states)

        def done() -> str | None:
            state = self.run_state(dag_id, run_id)
            return state if state in wanted else None

        return self.wait_for(done, timeout, f"run {dag_id}/{run_id} to reach {sorted(wanted)}")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """The task instance's current row (state, try_number, pid, start/end dates)."""
        cols = ("state", "try_number", "max_tries", "pid", "start_date", "end_date", "hostname")
        rows = self.query(
            f"SELECT {', '.join(cols)} FROM task_instance "
            "WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = -1",
            (dag_id, run_id, task_id),
        )
        if not rows:
            raise AssertionError(f"no task instance {dag_id}/{run_id}/{task_id}")
        return dict(zip(cols, rows[0], strict=True))

    def earlier_tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """The task instance's earlier tries (``task_instance_history``), first try first."""
        cols = ("try_number", "state", "pid", "start_date", "end_date")
        rows = self.query(
            f"SELECT {', '.join(cols)} FROM task_instance_history "
            "WHERE dag_id = %s AND run_id = %s AND task_id = %s AND map_index = -1 ORDER BY try_number",
            (dag_id, run_id, task_id),
        )
        return [dict(zip(cols, r, strict=True)) for r in rows]

    def xcom_return(self, dag_id: str, run_id: str, task_id: str) -> Any:
        """The task's return value (its ``return_value`` XCom), or ``None`` when it has none."""
        rows = self.query(
            "SELECT value FROM xcom WHERE dag_id = %s AND run_id = %s AND task_id = %s "
            "AND map_index = -1 AND key = 'return_value'",
            (dag_id, run_id, task_id),
        )
        if not rows:
            return None
        value = rows[0][0]
        # The column is JSONB: psycopg2 decodes it; a value stored as a JSON string is decoded once more.
        return json.loads(value) if isinstance(value, str) else value

    # -- when something fails --------------------------------------------------------
    def logs(self, lines: int = 60) -> str:
        """The tail of every service's log and of the newest task logs."""
        parts = []
        for path in sorted(glob.glob(os.path.join(self.root, "service-logs", "*.log"))):
            parts.append(f"===== {os.path.basename(path)} (last {lines} lines) =====\n{_tail(path, lines)}")
        task_logs = glob.glob(os.path.join(self.home, "logs", "dag_id=*", "**", "*.log"), recursive=True)
        for path in sorted(task_logs, key=os.path.getmtime)[-6:]:
            rel = os.path.relpath(path, self.home)
            parts.append(f"===== {rel} (last {lines} lines) =====\n{_tail(path, lines)}")
        return "\n".join(parts)

    def print_logs(self, headline: str) -> None:
        # pytest shows a failed test's captured output: the logs land next to the failure.
        print(f"\n{headline}\n{self.logs()}", file=sys.stderr)

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Print the services' log tails when the body fails."""
        try:
            yield
        except BaseException as exc:
            self.print_logs(f"failed: {exc!r}")
            raise


@contextlib.contextmanager
def running_airflow(
    dag_files: Iterable[str], extra_env: Mapping[str, str] | None = None
) -> Iterator[AirflowServices]:
    """:meth:`AirflowServices.start`, stopped however the body ends."""
    services = AirflowServices.start(dag_files, extra_env)
    try:
        yield services
    finally:
        services.stop()
