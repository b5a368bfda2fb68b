"""Before spark-submit: can the Spark standalone master be reached at all?

With its master down, spark-submit does not fail: the driver retries its registration for
about a minute and a half, logs "All masters are unresponsive" at INFO, stops its context,
and the load then fails on "Cannot call methods on a stopped SparkContext", a message that
names neither the batch nor the cause. A TCP connect to the ``spark://`` master(s) of the
connection, with a short timeout, says it in seconds, before anything is submitted.

Only standalone masters (``spark://host:port[,host:port...]``, any one of which may be the
active one) are probed; YARN, Kubernetes and ``local`` are left to spark-submit.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

PROBE_TIMEOUT_SECONDS = 5.0
DEFAULT_PORT = 7077


class MasterUnreachableError(ConnectionError):
    """No master of a ``spark://`` URL accepts a TCP connection; nothing was submitted."""


def standalone_masters(master: str | None) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each master in a ``spark://`` URL; ``[]`` for any other.

    :param master: the master URL of the Spark connection.
    """
    if not master or not master.strip().lower().startswith("spark://"):
        return []
    out = []
    for part in master.strip()[len("spark://") :].split(","):
        parsed = urlsplit(f"spark://{part.strip()}")
        if parsed.hostname:
            out.append((parsed.hostname, parsed.port or DEFAULT_PORT))
    return out


def check_master_reachable(master: str | None, conn_id: str, timeout: float = PROBE_TIMEOUT_SECONDS) -> None:
    """Raise :class:`MasterUnreachableError` when ``master`` is a standalone master URL and
    none of its masters accepts a TCP connection within ``timeout`` seconds.

    :param master: the master URL of the Spark connection.
    :param conn_id: the connection's id, for the message.
    :param timeout: seconds per master.
    """
    masters = standalone_masters(master)
    failures = []
    for host, port in masters:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            failures.append(f"{host}:{port}: {exc.strerror or type(exc).__name__}")
    if failures:
        raise MasterUnreachableError(
            f"the Spark master {master} of connection {conn_id!r} cannot be reached "
            f"({'; '.join(failures)}, within {timeout:g} s), so nothing was submitted; start the "
            "master, or point the connection at a running one (the task's retries try again)"
        )
