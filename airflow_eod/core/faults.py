"""Named fault points on the write path, armed only through an environment variable.

The crash tests, the chaos harness and the demo need an attempt to die at an exact
protocol boundary (once its plan is frozen, before the write, after the files, just before
the commit, between the commit and its durable record, after the commit, in the middle of
the cleanup). A point is armed with ``EOD_FAULTPOINTS="after_commit=raise@1,after_stage=kill"``:
``raise`` throws :class:`InjectedFault`, ``kill`` sends SIGKILL to the process,
``killafter:S`` sends it S seconds later from a timer thread (so the process dies at a
random moment of whatever runs next: Spark reading or writing), ``sleep:S`` pauses S
seconds (to open a race window on purpose), ``meet:DIR:N`` waits until N processes have
reached the point with the same DIR (each leaves a file there; at most 120 s, then it goes
on), so that racers pass the boundary together whatever their start-ups took, ``@N``
limits the point to try number N, and
``#K`` fires it only the K-th time this process reaches it (``after_commit=raise@1#2``: the
second commit of try 1, e.g. batch 2 of a catch-up run), and ``^PATH`` fires it only in the
process that creates the file ``PATH`` first, once across processes (``before_commit=kill^/tmp/x``:
YARN's first application attempt dies there, its re-attempt of the same driver goes on). With
the variable unset the points do nothing.

A worker's environment is not a safe place for a switch that makes production tasks die: a
variable copied from a test set-up, a template or a shell profile would take a real pipeline
down. So ``EOD_FAULTPOINTS`` is honoured only when a second, test-only switch is also on,
``EOD_FAULTPOINTS_TESTING=1``; without it the points do nothing and one warning says the
variable was ignored.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from airflow_eod.core.attempt import current_try

ENV_VAR = "EOD_FAULTPOINTS"
# The second switch: without it ENV_VAR is ignored (production workers never set it).
TESTING_SWITCH = "EOD_FAULTPOINTS_TESTING"
log = logging.getLogger(__name__)
_warned: set[str] = set()
# How often each armed item was reached in this process (for ``#K``), under the spec last
# seen: arming the points anew (another value) starts the count again.
_passes: dict[str, int] = {}
_passes_spec = [""]


def reset_counts() -> None:
    """Forget how often the points were reached (for ``#K``)."""
    _passes.clear()


POINTS = (
    "after_plan",
    "before_write",
    "after_stage",
    "before_commit",
    "before_record",
    "after_commit",
    "in_cleanup",
)
# The points a load job passes through. ``after_plan`` fires in the operator's freeze step and
# ``in_cleanup`` in its settle step, so a test that runs the job alone never reaches them.
JOB_POINTS = tuple(p for p in POINTS if p not in ("after_plan", "in_cleanup"))
# The boundaries of a plan-log compaction (:mod:`airflow_eod.core.records.compaction`): after
# a segment is written and read back, and after the entries it holds are deleted. Apart from
# POINTS, which the chaos harness and the job tests walk through.
COMPACTION_POINTS = ("compaction_after_segment", "compaction_after_deletes")


class InjectedFault(BaseException):
    """Raised at an armed fault point whose action is ``raise``.

    It derives from ``BaseException`` on purpose: it stands for the process dying, so the
    ``except Exception`` of the operator's decide step must not turn it into a success.
    """


def enabled() -> bool:
    """Whether fault points may fire: both variables set, the switch to exactly ``1``."""
    return os.environ.get(TESTING_SWITCH) == "1"


def _armed(point: str) -> list[tuple[str, int | None, int | None, str | None, str]]:
    spec = os.environ.get(ENV_VAR, "")
    if spec != _passes_spec[0]:
        _passes_spec[0] = spec
        reset_counts()
    if spec and not enabled():
        if spec not in _warned:
            _warned.add(spec)
            log.warning(
                "%s=%r is set but ignored: fault points fire only in tests, with %s=1 as well",
                ENV_VAR,
                spec,
                TESTING_SWITCH,
            )
        return []
    found: list[tuple[str, int | None, int | None, str | None, str]] = []
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, _, action = item.partition("=")
        if name != point:
            continue
        action, _, once = action.partition("^")
        action, _, nth = action.partition("#")
        action, _, try_no = action.partition("@")
        found.append(
            (
                action or "raise",
                int(try_no) if try_no else None,
                int(nth) if nth else None,
                once or None,
                item,
            )
        )
    return found


def _first_to_claim(path: str) -> bool:
    """Whether this process created ``path`` (and so fires the once-only fault)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def fault_point(point: str) -> None:
    """Fire the fault armed for ``point``, if any, for the try in progress
    (:func:`airflow_eod.core.attempt.current_try`)."""
    try_number = current_try()
    if point not in POINTS and point not in COMPACTION_POINTS:
        raise ValueError(f"unknown fault point {point!r}")
    for action, only_try, nth, once, item in _armed(point):
        if only_try is not None and only_try != try_number:
            continue
        if nth is not None:
            _passes[item] = _passes.get(item, 0) + 1
            if _passes[item] != nth:
                continue
        if once is not None and not _first_to_claim(once):
            continue
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if action.startswith("killafter:"):
            delay = float(action[len("killafter:") :])
            timer = threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True
            timer.start()
            continue
        if action.startswith("sleep:"):
            time.sleep(float(action[len("sleep:") :]))
            continue
        if action.startswith("meet:"):
            _meet(action[len("meet:") :])
            continue
        raise InjectedFault(f"injected fault at {point} (try {try_number})")


# How long a ``meet`` waits for the others at most: a racer that died or never reached the
# point must not hang its peers (the test's own race checks then fail, saying so).
MEET_TIMEOUT_S = 120.0


def _meet(spec: str) -> None:
    """``meet:DIR:N``: leave this process's file in DIR, then wait until N files are there.

    :param spec: ``DIR:N`` (DIR may hold colons: N is after the last one).
    """
    folder, _, count = spec.rpartition(":")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{os.getpid()}-{threading.get_ident()}"), "w"):
        pass
    deadline = time.monotonic() + MEET_TIMEOUT_S
    while len(os.listdir(folder)) < int(count):
        if time.monotonic() > deadline:
            log.warning("fault point meet:%s: the others did not come within %.0f s", spec, MEET_TIMEOUT_S)
            return
        time.sleep(0.05)
