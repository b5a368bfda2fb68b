"""Warm child processes for the tries the chaos harness SIGKILLs (``tests/chaos/attempt.py``).

One child is kept warming (its JVM started, its first Spark job run) while the harness
works; :meth:`WarmChildren.take` hands it out and starts the next one at once. The harness
owns every child it starts and ends each by its own pid (:meth:`WarmChildren.close`); a
child also exits by itself when its stdin closes, so none outlives the harness.

A child's JVM is most of a trial's CPU: every SIGKILL costs one, and on a machine of two
cores a spare warming "in the background" takes its CPU from the trial all the same
(16.7 CPU seconds to READY, measured). So a child's JVM is made cheap to start, none of it
changing what the try does: the client compiler only (a try lives seconds, the server
compiler's work never pays back), the serial collector (no GC threads), one Spark core
(``local[1]``: the try's data is a few rows), and a class-data-sharing archive of the
classes a child loads (:func:`cds_archive`), dumped once per machine by a training child
(:meth:`WarmChildren.build_archive`; ``benchmarks/chaos.py`` calls it) and mapped by every
child after it (10.3 and then 6.7 CPU seconds to READY, measured).
A JVM that finds the archive stale (another JDK or classpath) ignores it and loads its
classes from the jars as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.faults import ENV_VAR
from tests.chaos.attempt import CHILD_CONF, LATE_JVM, LEAN, READY, RESULT, TRAIN
from tests.chaos.report import REPORT
from tests.chaos.store import on_s3
from tests.support.spark_conf import S3A_JARS_ENV

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The JVM options of every child (see the module's docstring).
# The JVM's own warnings go to stderr (the child's log file), never to stdout, which is the
# pipe the harness reads READY and RESULT from: a class-data-sharing warning there would be
# read as the child's first line, and the thousands the archive's dump prints would fill
# the pipe nobody reads after READY and hang the JVM.
CHILD_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable -Xlog:all=warning:stderr"
CHILD_MASTER = "local[1]"
# Where the class-data-sharing archive is kept (one per JDK and Spark installation).
CDS_DIR = os.path.join(os.path.expanduser("~"), ".cache", "airflow-eod", "chaos-cds")
# Set to 0 to start children without the archive (to measure what it saves).
CDS_SWITCH = "EOD_CHAOS_CDS"
# Faults of a try that dies at its freeze, before it needs Spark: a lean child runs it.
LEAN_FAULTS = ("after_plan=kill",)


def cds_archive() -> str:
    """The path of the archive for this JDK and this Spark (it may not exist yet): named by
    the java binary and the jars on the JVM's class path, with their sizes and times, so a
    new JDK or a new pyspark gets an archive of its own."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = os.path.realpath(shutil.which("java", path=os.path.join(home, "bin") if home else None) or "java")
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    digest = hashlib.sha256()
    listed = sorted(os.path.join(jars, n) for n in os.listdir(jars)) if os.path.isdir(jars) else []
    if on_s3():
        # A child for a table on S3 has the s3a jars on its class path: an archive of its own
        # (a JVM ignores one dumped with another class path).
        listed += [j for j in os.environ.get(S3A_JARS_ENV, "").split(",") if j]
    for path in [java, *listed]:
        try:
            st = os.stat(path)
        except OSError:
            continue
        digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return os.path.join(CDS_DIR, f"child-{digest.hexdigest()[:16]}.jsa")


def _jvm_pids(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (a child's JVM), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, exited and not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class Child:
    """A started child: its process and the file its stderr (logs, JVM output) goes to."""

    proc: subprocess.Popen[str]
    log_path: str
    ended: str = ""  # the last line of its log, when its try ended with an error

    def wait_ready(self, timeout: float = 600) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != READY:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"chaos child did not start: {line!r}; {self.log_tail()}")

    def log_tail(self, n: int = 3) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return " | ".join(fh.read().strip().splitlines()[-n:])
        except OSError:
            return ""

    def run(self, args: dict[str, Any], faults: str, timeout: float = 600) -> tuple[int, str | None]:
        """Send the try; wait for it to end. Returns the exit code (``-9``: SIGKILLed) and
        the outcome it printed, if it finished."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(dict(args, faults=faults)) + "\n")
        self.proc.stdin.flush()
        out, _ = self.proc.communicate(timeout=timeout)
        outcome = None
        for line in out.splitlines():
            if line.startswith(RESULT):
                outcome = json.loads(line[len(RESULT) :])["outcome"]
            elif line.strip() == LATE_JVM:
                REPORT.count("events", "lean_child_started_its_jvm")
        if self.proc.returncode not in (0, -9):
            # Why the try ended on its own (its traceback's last line): the sample says it.
            self.ended = self.log_tail(1)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        return self.proc.returncode, outcome


class WarmChildren:
    """A supply of warm children, one warming ahead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The warming spare of each kind: with its JVM started ("--serve"), or lean.
        self._spares: dict[str, Child | None] = {"--serve": None, LEAN: None}

    def _jvm_options(self, archive: str | None) -> str:
        if archive is None:
            return CHILD_JVM_OPTIONS
        if os.path.isfile(archive):
            return f"{CHILD_JVM_OPTIONS} -XX:SharedArchiveFile={archive}"
        return CHILD_JVM_OPTIONS

    def _spawn(self, *, mode: str = "--serve", jvm_options: str | None = None) -> Child:
        archive = cds_archive() if os.environ.get(CDS_SWITCH, "1") != "0" else None
        conf = {
            "spark.driver.extraJavaOptions": jvm_options or self._jvm_options(archive),
            "spark.master": CHILD_MASTER,
            "spark.sql.shuffle.partitions": "1",
        }
        env = dict(os.environ)
        env.pop(ENV_VAR, None)  # the parent arms its own in-process tries here; not the child's
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        env[CHILD_CONF] = json.dumps(conf)
        fd, log_path = tempfile.mkstemp(prefix="eod-chaos-child-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.attempt", mode],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        return Child(proc, log_path)

    def build_archive(self, timeout: float = 900) -> str | None:
        """Dump the class-data-sharing archive if there is none yet (once per machine), in a
        training child of its own; the path of the archive, or ``None`` if none was made
        (the children then start from the jars, as before)."""
        archive = cds_archive()
        if os.path.isfile(archive) or os.environ.get(CDS_SWITCH, "1") == "0":
            return archive if os.path.isfile(archive) else None
        os.makedirs(CDS_DIR, exist_ok=True)
        tmp = f"{archive}.{os.getpid()}.tmp"
        child = self._spawn(mode=TRAIN, jvm_options=f"{CHILD_JVM_OPTIONS} -XX:ArchiveClassesAtExit={tmp}")
        jvms: list[int] = []
        try:
            child.wait_ready()
            jvms = _jvm_pids(child.proc.pid)
            assert child.proc.stdin is not None
            child.proc.stdin.close()  # the child exits; its JVM sees its stdin close and dumps
            child.proc.wait(timeout=timeout)
            deadline = time.monotonic() + timeout
            while any(_alive(p) for p in jvms) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not any(_alive(p) for p in jvms) and os.path.isfile(tmp) and os.path.getsize(tmp) > 0:
                os.replace(tmp, archive)
                return archive
            return None
        finally:
            child.proc.kill()
            child.proc.wait()
            for pid in jvms:  # a JVM still dumping when the time is up (ours: our child started it)
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            for path in (tmp, child.log_path):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    def take(self) -> Lease:
        """A lease on a child: :meth:`Lease.run` takes the ready child of the kind its try
        needs (the warm one, or a new one if none is warming), and the next one of that kind
        starts warming before the try is sent."""
        return Lease(self)

    def ready(self, mode: str) -> Child:
        with self._lock:
            child, self._spares[mode] = self._spares[mode], None
            if child is None:
                child = self._spawn(mode=mode)
            self._spares[mode] = self._spawn(mode=mode)
        child.wait_ready()
        return child

    def close(self) -> None:
        """End the warming children (started by us; ended by their pids)."""
        with self._lock:
            spares = [c for c in self._spares.values() if c is not None]
            self._spares = {mode: None for mode in self._spares}
        for child in spares:
            child.proc.kill()
            child.proc.wait()
            try:
                os.unlink(child.log_path)
            except OSError:
                pass


class Lease:
    """A child to be: the kind is chosen when the try's faults are known."""

    def __init__(self, pool: WarmChildren) -> None:
        self.pool = pool

    def run(self, args: dict[str, Any], faults: str, timeout: float = 600) -> tuple[int, str | None]:
        """Run the try in a ready child (lean for a try aimed to die at its freeze)."""
        child = self.pool.ready(LEAN if faults in LEAN_FAULTS else "--serve")
        return child.run(args, faults, timeout)


CHILDREN = WarmChildren()
