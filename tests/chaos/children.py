"""Warm child processes for the tries the chaos harness SIGKILLs (``tests/chaos/attempt.py``).

One child is kept warming (its JVM started, its first Spark job run) while the harness
works; :meth:`WarmChildren.take` hands it out and starts the next one at once. The harness
owns every child it starts and ends each by its own pid (:meth:`WarmChildren.close`); a
child also exits by itself when its stdin closes, so none outlives the harness.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.faults import ENV_VAR
from tests.chaos.attempt import READY, RESULT

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@dataclass
class Child:
    """A started child: its process and the file its stderr (logs, JVM output) goes to."""

    proc: subprocess.Popen[str]
    log_path: str

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
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
        return self.proc.returncode, outcome


class WarmChildren:
    """A supply of warm children, one warming ahead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spare: Child | None = None

    def _spawn(self) -> Child:
        env = dict(os.environ)
        env.pop(ENV_VAR, None)  # the parent arms its own in-process tries here; not the child's
        env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
        fd, log_path = tempfile.mkstemp(prefix="eod-chaos-child-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.attempt", "--serve"],
                cwd=REPO,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        return Child(proc, log_path)

    def take(self) -> Child:
        """A ready child (the warm one, or a new one if none is warming); the next one starts
        warming before this returns."""
        with self._lock:
            child, self._spare = self._spare, None
            if child is None:
                child = self._spawn()
            self._spare = self._spawn()
        child.wait_ready()
        return child

    def close(self) -> None:
        """End the warming child (started by us; ended by its pid)."""
        with self._lock:
            child, self._spare = self._spare, None
        if child is not None:
            child.proc.kill()
            child.proc.wait()
            try:
                os.unlink(child.log_path)
            except OSError:
                pass


CHILDREN = WarmChildren()
