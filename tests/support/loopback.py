"""What every test server started on 127.0.0.1 shares: free ports, a log tail, a stop.

The servers (tests/support/s3_server.py, azurite_server.py, gcs_server.py, postgres_server.py)
each run their processes in a session of their own and register them with the reaper
(tests/support/reaper.py); :func:`stop_processes` is the orderly end of the same thing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess

from tests.support.reaper import Reaper, kill_tree


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports of 127.0.0.1 free at this moment (all bound at once, so distinct)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One port of 127.0.0.1 free at this moment."""
    return free_ports(1)[0]


def log_tail(path: str, n: int = 2000) -> str:
    """The last ``n`` bytes of the log at ``path`` ("" when there is none yet)."""
    try:
        with open(path, "rb") as fh:
            return fh.read()[-n:].decode(errors="replace")
    except OSError:
        return ""


def stop_processes(
    procs: list[subprocess.Popen[bytes]],
    root: str,
    reaper: Reaper | None,
    *,
    unlink: tuple[str, ...] | list[str] = (),
) -> None:
    """Kill each process's tree (a grace period first), remove the server's directory and the
    extra files in ``unlink``, and release the reaper, whose work this was."""
    for proc in procs:
        if proc.poll() is None:
            kill_tree(proc.pid, grace=5.0)
        proc.wait(timeout=10)
    shutil.rmtree(root, ignore_errors=True)
    for path in unlink:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    if reaper is not None:
        reaper.release()
