"""Where a chaos trial's time goes: wall time per phase and the CPU of the whole process tree.

``python -m benchmarks.chaos ... --timings`` installs these probes before the trials start.
They wrap functions from the outside (the harness's and the provider's, by module and name)
and change nothing they wrap, so the same probes measure any version of the harness. Phases
run in worker threads too (backfills, zombies, two runs at once), so phase sums may exceed
the wall time; ``main`` marks the phases timed on the main thread only.

The CPU sampler adds up user and system time of this process and every descendant (the
children's Python and their JVMs, which nobody waits for once SIGKILLed), keeping each
process's last sample: on a machine shared with other work, CPU seconds compare runs better
than wall seconds do.
"""

from __future__ import annotations

import functools
import importlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# (module, attribute path, label). Every module that imported a name gets its own probe.
PROBES: list[tuple[str, str, str]] = [
    ("tests.chaos.machine", "ChaosMachine.setup", "trial: setup (tables, PostgreSQL tables)"),
    ("tests.chaos.machine", "ChaosMachine.teardown", "trial: teardown (drain + checks + audit)"),
    ("tests.chaos.machine", "ChaosMachine.drain", "trial: drain"),
    ("tests.chaos.machine", "ChaosMachine.attempt", "attempt: in-process try"),
    ("tests.chaos.machine", "ChaosMachine.killed_try", "attempt: child try (whole)"),
    ("tests.chaos.machine", "ChaosMachine.maintain", "other writer: maintenance"),
    ("tests.chaos.machine", "ChaosMachine.wait_past_retention", "sleep: wait past retention"),
    ("tests.chaos.machine", "check_tables", "check: files oracle"),
    ("tests.chaos.machine", "check_jdbc_batches", "check: JDBC oracle"),
    ("tests.chaos.machine", "audit_table", "check: audit (verify)"),
    ("tests.chaos.children", "Child.wait_ready", "child: wait until warm (start-up not hidden)"),
    ("tests.chaos.children", "Child.run", "child: run the try until it ends or dies"),
    ("tests.chaos.children", "WarmChildren._spawn", "child: spawn"),
    ("tests.chaos.jdbc_world", "JdbcHistory.create", "postgres: create table"),
    ("tests.chaos.jdbc_world", "JdbcHistory._record", "postgres: record snapshot"),
    ("airflow_eod.core.load_flow", "freeze", "load: freeze (plan/ask)"),
    ("airflow_eod.spark.load_job", "read_batch", "load: read (lazy DataFrame)"),
    ("airflow_eod.spark.load_job", "split_malformed", "load: split malformed (Spark jobs)"),
    ("airflow_eod.spark.load_job", "single_pass", "load: single pass"),
    ("airflow_eod.spark.load_job", "stage_outbox", "load: stage quarantine outbox"),
    ("airflow_eod.spark.staging", "stage_dataframe", "load: stage (Spark write)"),
    ("airflow_eod.spark.load_job", "commit_batch", "load: commit"),
    ("airflow_eod.spark.load_job", "check_retention", "load: retention check"),
    ("airflow_eod.spark.load_job", "settle_committed", "load: settle"),
    ("airflow_eod.spark.load_job", "decide_after_failure", "load: decide after failure"),
    ("time", "sleep", "sleep: time.sleep (any thread)"),
]


class Timings:
    """Wall seconds and calls per label, and the trial count, across a run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.main_seconds: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self.started = time.monotonic()

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            dt = time.monotonic() - t0
            with self._lock:
                self.seconds[label] += dt
                self.calls[label] += 1
                if threading.current_thread() is threading.main_thread():
                    self.main_seconds[label] += dt

    def lines(self, trials: int) -> list[str]:
        wall = time.monotonic() - self.started
        out = [f"timing: wall {wall:.0f} s for {trials} trial(s), {wall / max(trials, 1):.1f} s per trial"]
        for label in sorted(self.seconds, key=lambda k: -self.seconds[k]):
            out.append(
                f"timing: {label}: {self.seconds[label]:.1f} s in {self.calls[label]} call(s)"
                f" (main thread {self.main_seconds[label]:.1f} s)"
            )
        return out


TIMINGS = Timings()
_installed: list[tuple[Any, str, Any]] = []


def _wrap(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        with TIMINGS.phase(label):
            return fn(*args, **kwargs)

    timed.__chaos_timed__ = True  # type: ignore[attr-defined]
    return timed


def install() -> None:
    """Wrap every probe that exists in this tree (a missing one is skipped)."""
    for module_name, path, label in PROBES:
        owner: Any = importlib.import_module(module_name)
        *outer, name = path.split(".")
        for part in outer:
            owner = getattr(owner, part, None)
        fn = getattr(owner, name, None) if owner is not None else None
        if fn is None or getattr(fn, "__chaos_timed__", False):
            continue
        _installed.append((owner, name, fn))
        setattr(owner, name, _wrap(fn, label))


class CpuSampler:
    """CPU seconds this process and all its descendants spend after :meth:`start`, sampled
    every ``every`` s."""

    def __init__(self, every: float = 0.5) -> None:
        import psutil

        self._psutil = psutil
        self.every = every
        self.last: dict[tuple[int, float], float] = {}
        self.processes: set[tuple[int, float]] = set()
        self.base: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-cpu-sampler", daemon=True)

    def start(self) -> CpuSampler:
        self._sample()
        self.base = dict(self.last)  # what the processes had spent before the trials
        self.processes.clear()
        self._thread.start()
        return self

    def _sample(self) -> None:
        me = self._psutil.Process()
        for p in [me, *me.children(recursive=True)]:
            try:
                key = (p.pid, p.create_time())
                t = p.cpu_times()
                self.last[key] = t.user + t.system
                self.processes.add(key)
            except self._psutil.Error:
                continue

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def stop(self) -> float:
        self._sample()
        self._stop.set()
        return sum(t - self.base.get(k, 0.0) for k, t in self.last.items())

    def line(self, trials: int) -> str:
        total = self.stop()
        return (
            f"timing: CPU of the process tree {total:.0f} s ({total / max(trials, 1):.1f} s per trial), "
            f"{len(self.processes)} processes seen"
        )
