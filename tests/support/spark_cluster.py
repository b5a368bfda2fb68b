"""A real Spark standalone master and one worker on 127.0.0.1, for the `cluster` tier.

:class:`SparkStandalone` runs them from the installed pyspark wheel with its ``spark-class``
script, the way a Spark distribution's ``sbin/start-master.sh`` would, but in the
foreground and in process groups of their own, so :meth:`SparkStandalone.stop` can end them
and every executor the worker forked. :func:`spark_cluster` is the session fixture; import it
into a conftest to use it.

What runs is exposed as data, so that ``tests/tooling/test_compose.py`` can hold
``docker-compose.yaml``'s Spark services to it:

- :func:`master_argv` and :func:`worker_argv`: the argv, with ``spark-class`` (from PATH) as
  argv[0]; the tests replace it with the wheel's script;
- :data:`SPARK_ENV`: the environment of both processes. ``{host}`` is the address the
  process binds and advertises (127.0.0.1 here, the service name in compose); fill it with
  :func:`render_env`;
- :data:`WORKER_CORES` and :data:`WORKER_MEMORY`: the worker's size.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

import pytest

from tests.support.reaper import Reaper, watch

HOST = "127.0.0.1"
SPARK_CLASS = "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
# Two cores, so that two applications of one core each (a zombie driver and the retry that
# races it) run side by side instead of the second queueing behind the first. The memory
# covers two 1g executors; it is an allowance the master hands out, not a reservation.
WORKER_CORES = 2
WORKER_MEMORY = "2g"
# `{host}`: what each process binds to and advertises. Without it Spark picks the machine's
# first non-loopback address, which a sandbox may not route, and warns about it.
SPARK_ENV: dict[str, str] = {"SPARK_LOCAL_IP": "{host}"}

START_TIMEOUT = 120.0


def master_argv(port: int | str, webui_port: int | str, host: str = HOST) -> list[str]:
    """The master's argv; ``spark-class`` is looked up on PATH (pip puts it there)."""
    return [SPARK_CLASS, MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(webui_port)]


def worker_argv(
    master_url: str,
    webui_port: int | str,
    work_dir: str,
    host: str = HOST,
    cores: int | str = WORKER_CORES,
    memory: str = WORKER_MEMORY,
) -> list[str]:
    """The worker's argv. ``work_dir`` holds each executor's files and logs; without it the
    worker writes them into ``$SPARK_HOME/work``, inside the installed pyspark package."""
    return [
        SPARK_CLASS,
        WORKER_CLASS,
        master_url,
        "--host",
        host,
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--webui-port",
        str(webui_port),
        "--work-dir",
        work_dir,
    ]


def render_env(host: str = HOST) -> dict[str, str]:
    """:data:`SPARK_ENV` with ``{host}`` filled."""
    return {key: value.format(host=host) for key, value in SPARK_ENV.items()}


def pyspark_home() -> str:
    """The installed pyspark package: a Spark distribution (jars, ``bin/``) of its own."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def spark_submit() -> str:
    return os.path.join(pyspark_home(), "bin", "spark-submit")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def master_state(webui_url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The master's state from its web UI's JSON endpoint: workers, apps, drivers."""
    with urllib.request.urlopen(f"{webui_url}/json/", timeout=timeout) as resp:
        state: dict[str, Any] = json.load(resp)
    return state


def applications(webui_url: str, completed: bool = False) -> list[dict[str, Any]]:
    """The master's running applications (``activeapps``), and the finished ones too with
    ``completed``. Each is a dict with ``id``, ``name``, ``state``, ``cores``, ``user``..."""
    state = master_state(webui_url)
    apps: list[dict[str, Any]] = list(state.get("activeapps", []))
    if completed:
        apps += state.get("completedapps", [])
    return apps


def _tail(path: str, lines: int = 40) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:])
    except OSError as exc:
        return f"({exc})"


def _stop_group(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the process group, then SIGKILL it. The worker's executors are forked into
    the worker's group, so this ends them too (a zombie driver's executors included)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # The leader may be gone while executors it forked live on in its group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


@dataclass
class SparkStandalone:
    """A Spark standalone master and one worker on 127.0.0.1.

    ``start()`` returns once the worker has registered with the master; ``stop()`` ends both
    and everything they forked, removes its directory, and may be called more than once.
    """

    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    worker_webui_port: int = field(default_factory=free_port)
    cores: int = WORKER_CORES
    memory: str = WORKER_MEMORY
    root: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="eod-spark-standalone-"))
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[IO[bytes]] = field(default_factory=list)
    _reapers: list[Reaper] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    @property
    def work_dir(self) -> str:
        return os.path.join(self.root, "work")

    def log_path(self, name: str) -> str:
        return os.path.join(self.root, f"{name}.log")

    def env(self) -> dict[str, str]:
        # SPARK_HOME pins spark-class to this wheel's jars, whatever the caller's SPARK_HOME.
        return {**os.environ, "SPARK_HOME": pyspark_home(), **render_env(HOST)}

    def argv(self, name: str) -> list[str]:
        """The argv actually run: the data above, with the wheel's own ``spark-class``."""
        if name == "master":
            argv = master_argv(self.port, self.webui_port)
        else:
            argv = worker_argv(
                self.master_url, self.worker_webui_port, self.work_dir, cores=self.cores, memory=self.memory
            )
        return [os.path.join(pyspark_home(), "bin", SPARK_CLASS), *argv[1:]]

    def _spawn(self, name: str) -> None:
        log = open(self.log_path(name), "wb")  # closed by stop()
        self._logs.append(log)
        self.processes[name] = subprocess.Popen(
            self.argv(name),
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # Its own session outlives a test run that dies without stop(): the watcher ends it.
        self._reapers.append(watch([{"kill_group": self.processes[name].pid}, {"rmtree": self.root}]))

    def _wait(self, what: str, ready: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"the Spark {name} exited ({proc.returncode}) while waiting for {what}:\n"
                        f"{_tail(self.log_path(name))}"
                    )
            with contextlib.suppress(OSError, ValueError):
                if ready():
                    return
            time.sleep(0.25)
        logs = "\n".join(f"--- {name}:\n{_tail(self.log_path(name))}" for name in self.processes)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")

    def start(self, timeout: float = START_TIMEOUT) -> SparkStandalone:
        if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
            raise RuntimeError("Java 17 or newer is required to run a Spark master and worker")
        os.makedirs(self.work_dir, exist_ok=True)
        try:
            self._spawn("master")
            self._wait(
                "the master's web UI", lambda: master_state(self.webui_url)["status"] == "ALIVE", timeout
            )
            self._spawn("worker")
            self._wait(
                "the worker to register with the master",
                lambda: master_state(self.webui_url).get("aliveworkers", 0) >= 1,
                timeout,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def applications(self, completed: bool = False) -> list[dict[str, Any]]:
        """Running applications, plus finished ones with ``completed`` (see :func:`applications`)."""
        return applications(self.webui_url, completed=completed)

    def drivers(self) -> list[dict[str, Any]]:
        """Drivers the master runs for cluster deploy mode (``activedrivers``); client-mode
        drivers run beside spark-submit and show up only as applications."""
        return list(master_state(self.webui_url).get("activedrivers", []))

    def wait_until_idle(self, timeout: float = 120.0) -> None:
        """Wait until no application runs, e.g. until a zombie driver has ended."""
        self._wait("no running application", lambda: not self.applications(), timeout)

    def stop(self) -> None:
        # The worker first, so the master does not log it as lost and try to reschedule.
        for name in ("worker", "master"):
            proc = self.processes.pop(name, None)
            if proc is not None:
                _stop_group(proc, grace=15)
        for log in self._logs:
            log.close()
        self._logs.clear()
        # The executors' logs and files: a failed start has already printed the tails.
        shutil.rmtree(self.root, ignore_errors=True)
        for reaper in self._reapers:
            reaper.release()
        self._reapers.clear()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_spark_standalone(**kwargs: Any) -> Iterator[SparkStandalone]:
    cluster = SparkStandalone(**kwargs)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def submit_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for a ``spark-submit`` to this cluster: loopback binding, and this
    interpreter as the Python of the driver and the executors."""
    return {
        **os.environ,
        "SPARK_HOME": pyspark_home(),
        **render_env(HOST),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **(extra or {}),
    }


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[SparkStandalone]:
    """One Spark standalone master and worker on 127.0.0.1 for the test session."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Java 17 or newer is required to run a Spark master and worker")
    with running_spark_standalone() as cluster:
        yield cluster


def task_env(cluster: SparkStandalone, conn_id: str) -> dict[str, str]:
    """What a submit-mode task needs in its environment: the Airflow Spark connection
    ``conn_id`` to ``cluster`` (client deploy mode), loopback binding, and ``spark-submit``
    on PATH (the pyspark wheel's, beside this Python, which SparkSubmitHook runs by name)."""
    return {
        f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(
            {"conn_type": "spark", "host": cluster.master_url, "extra": {"deploy-mode": "client"}}
        ),
        "SPARK_LOCAL_IP": HOST,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    }
