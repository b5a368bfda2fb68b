"""A watcher that cleans up after a test or benchmark process that died without doing it.

PostgreSQL (daemonized by ``pg_ctl``), the Spark standalone master and worker and the Airflow
services run in sessions of their own, so they outlive the process that started them
whenever its own cleanup does not run: a SIGKILL, a SIGTERM (pytest's default action skips
fixture teardown, and Airflow's task runner replaces any SIGTERM handler we could install),
a second Ctrl-C during teardown. A signal handler cannot cover those; a second process can.

:func:`watch` starts this file as a process of its own session, holding the read end of a
pipe whose write end only the starting process holds. The starter's normal cleanup calls
:meth:`Reaper.release`, which writes one byte: the watcher exits and does nothing. If
instead the starter dies, the kernel closes its end, the watcher reads end-of-file and
runs its actions: it learns of the death at once, without polling for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

# How long to wait for an ``initdb`` or ``pg_ctl start`` that is still running (a dead
# starter's children live on), so that the server they bring up is stopped rather than
# found missing.
PG_SETTLE_SECONDS = 120.0
GRACE_SECONDS = 10.0


@dataclass(eq=False)
class Reaper:
    """The starter's side of one watcher: :meth:`release` once the cleanup is done."""

    write_fd: int
    proc: subprocess.Popen[bytes]

    def release(self) -> None:
        """Tell the watcher the starter cleaned up itself; it exits without acting."""
        _UNRELEASED.discard(self)
        if self.write_fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self.write_fd, b"x")
        os.close(self.write_fd)
        self.write_fd = -1
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


# The write ends this process holds. A child made by fork() (OpenLineage's listener forks a
# process pool during dag.test(), for one) inherits every descriptor, and a watcher sees
# end-of-file only once all holders are gone: the child closes its copies at once.
_UNRELEASED: set[Reaper] = set()


def _close_inherited_write_ends() -> None:
    for reaper in _UNRELEASED:
        with contextlib.suppress(OSError):
            os.close(reaper.write_fd)
        reaper.write_fd = -1  # the child must neither write nor close a reused number
    _UNRELEASED.clear()


os.register_at_fork(after_in_child=_close_inherited_write_ends)


def watch(actions: list[dict[str, Any]]) -> Reaper:
    """Start a watcher that runs ``actions`` if this process dies before :meth:`Reaper.release`.

    Actions, run in order: ``{"stop_postgres": datadir, "bindir": ..., "as_user": [...]}``,
    ``{"kill_tree": pid}`` (SIGTERM the process and its descendants, SIGKILL what is left),
    ``{"kill_group": pgid}``, ``{"rmtree": path}`` and ``{"unlink": path}`` (a file or socket).
    """
    # A pid in an action may be reused by an unrelated process by the time the watcher acts:
    # it acts only on the process that had that pid now, known by its start time.
    actions = [_with_start_time(action) for action in actions]
    read_fd, write_fd = os.pipe()  # both non-inheritable: no spawned child holds the write end
    try:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(read_fd), json.dumps(actions)],
            pass_fds=(read_fd,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to the test run's terminal does not end it
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    reaper = Reaper(write_fd, proc)
    _UNRELEASED.add(reaper)
    return reaper


def _start_time(pid: int) -> float | None:
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.NoSuchProcess:
        return None


def _with_start_time(action: dict[str, Any]) -> dict[str, Any]:
    pid = action.get("kill_tree", action.get("kill_group"))
    return {**action, "start_time": _start_time(int(pid))} if pid is not None else action


def _same_process(pid: int, start_time: float | None) -> bool:
    return start_time is not None and _start_time(pid) == start_time


def _cmdlines_mentioning(text: str) -> list[tuple[int, str]]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append((int(pid), cmdline))
    return found


def stop_postgres(datadir: str, bindir: str, as_user: list[str]) -> None:
    """Stop the server of ``datadir`` if one runs, once no ``initdb`` or ``pg_ctl start`` of
    it is still running."""
    # The dead starter's initdb or ``pg_ctl start`` may still be running: wait for them, or
    # the server they bring up would come up after the stop below.
    deadline = time.monotonic() + PG_SETTLE_SECONDS
    while time.monotonic() < deadline and any(
        "/initdb " in cmd or "/pg_ctl " in cmd for _, cmd in _cmdlines_mentioning(datadir)
    ):
        time.sleep(0.2)
    if os.path.exists(os.path.join(datadir, "postmaster.pid")):
        subprocess.run(
            [*as_user, f"{bindir}/pg_ctl", "-D", datadir, "-m", "fast", "-w", "stop"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


def kill_tree(pid: int, grace: float = GRACE_SECONDS) -> None:
    """SIGTERM a process and everything below it, then SIGKILL what is left after ``grace``.

    Airflow's task processes and their Spark JVMs run in process groups of their own (the
    task supervisor puts them there), so killing a service's group alone would leak them:
    the whole tree is collected first, by pid.
    """
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


def _kill_group(pgid: int, start_time: float | None) -> None:
    # While any member of the group lives, Linux gives its id to no new process; once the
    # leader is gone, a process with the leader's pid is a new one and not ours, and the
    # group it leads is not the one we were asked to end.
    if _start_time(pgid) is not None and not _same_process(pgid, start_time):
        return
    # Here the group's leader is no child of ours (its parent died), so an empty group
    # means every member has exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while time.monotonic() < deadline:
            os.killpg(pgid, 0)  # raises ProcessLookupError once the group is empty
            time.sleep(0.2)
        os.killpg(pgid, signal.SIGKILL)


def _run(actions: list[dict[str, Any]]) -> None:
    for action in actions:
        with contextlib.suppress(Exception):  # one failed action must not stop the others
            if "stop_postgres" in action:
                stop_postgres(action["stop_postgres"], action["bindir"], action.get("as_user", []))
            elif "kill_tree" in action:
                if _same_process(int(action["kill_tree"]), action.get("start_time")):
                    kill_tree(int(action["kill_tree"]))
            elif "kill_group" in action:
                _kill_group(int(action["kill_group"]), action.get("start_time"))
            elif "rmtree" in action:
                shutil.rmtree(action["rmtree"], ignore_errors=True)
            elif "unlink" in action:
                os.unlink(action["unlink"])


def main(argv: list[str]) -> int:
    read_fd, actions = int(argv[1]), json.loads(argv[2])
    # The watcher must outlive whatever ends its starter's session or terminal.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    if os.read(read_fd, 1):  # released: the starter cleaned up
        return 0
    _run(actions)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
