"""The Spark JVM's own log lines, at their real levels, in the task's Python log.

A task's stderr reaches Airflow's task log as ``level=error`` lines whatever they say, so
Spark's WARNs (and its INFOs, with another log4j setting) read as errors. A JVM launched
here writes its stdout and stderr into pipes instead; a thread reads them and logs each
line through Python's logging at the level log4j printed (``WARN`` as ``WARNING``), with
the lines that continue an entry (a stack trace) at that entry's level.

A write whose failure is expected and explained (a batch read FAILFAST that holds malformed
records: :mod:`airflow_eod.spark.bad_records`) makes Spark log its stack traces at ERROR and
WARN, with Spark's advice to read PERMISSIVE, which would turn the check off. Around such a
write the JVM's lines at WARNING and above are held (:func:`held`): released at their own
levels when the write succeeds or fails for another reason, at DEBUG when the failure was
the expected one, so that the task log shows the one clear error the load raises.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

LOGGER_NAME = "airflow_eod.spark.jvm"
# log4j2's pattern in Spark's default configuration: "yy/MM/dd HH:mm:ss LEVEL logger: message".
_ENTRY = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}


def level_of(line: str, previous: int) -> int:
    """The level of one line the JVM printed: log4j's, else the entry it continues."""
    m = _ENTRY.match(line)
    if m:
        return _LEVELS[m.group(1)]
    if line.startswith("WARNING:"):  # the JVM's own warnings ("Using incubator modules")
        return logging.WARNING
    return previous


def _forward(stream: IO[bytes], logger: logging.Logger) -> None:
    carried = logging.INFO  # the level a line without its own continues
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\r\n")
        if not line.strip():
            continue
        level = level_of(line, carried)
        if not line.startswith("WARNING:"):  # the JVM's own warnings are one line each
            carried = level
        try:
            logger.log(level, "%s", line)
        except Exception:  # a broken handler must not stop the reading: the JVM would block
            pass


# Whether this process's JVM writes into LOGGER_NAME (only then is there anything to hold).
_routed = False
_HELD_MAX = 5000  # lines held at most; a longer hold releases the oldest at their levels
_SYNC_SECONDS = 5.0


class Hold(logging.Filter):
    """The JVM's lines at WARNING and above, held back from the log while a write runs.

    :ivar quiet: set by the caller when the write failed in the expected, explained way:
        the held lines are then released at DEBUG.
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.records: list[logging.LogRecord] = []
        self.quiet = False
        self.marker = f"eod-jvm-log-sync-{uuid.uuid4().hex}"
        self.synced = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.marker in str(record.msg) or self.marker in str(record.args):
            self.synced.set()
            return False
        if record.levelno < logging.WARNING:
            return True
        self.records.append(record)
        if len(self.records) > _HELD_MAX:
            self._emit(self.records.pop(0), quiet=False)
        return False

    def _emit(self, record: logging.LogRecord, *, quiet: bool) -> None:
        if quiet:
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
            if not self.logger.isEnabledFor(logging.DEBUG):
                return
        self.logger.handle(record)

    def release(self) -> None:
        self.logger.removeFilter(self)
        for record in self.records:
            self._emit(record, quiet=self.quiet)
        self.records = []


@contextmanager
def held(spark: SparkSession | None) -> Iterator[Hold]:
    """Hold the JVM's lines at WARNING and above while the block runs (see the module doc).

    On the way out a marker line is logged through log4j and awaited, so that every line
    the JVM printed during the block has reached Python before the held lines are released.

    :param spark: the session whose JVM logs; ``None`` holds nothing.
    """
    logger = logging.getLogger(LOGGER_NAME)
    hold = Hold(logger)
    if spark is None or not _routed:  # a JVM writing to stderr itself: nothing reaches the logger
        yield hold
        return
    logger.addFilter(hold)
    try:
        yield hold
    finally:
        try:
            jvm: Any = spark.sparkContext._jvm
            jvm.org.apache.logging.log4j.LogManager.getLogger("airflow_eod.sync").error(hold.marker)
            hold.synced.wait(_SYNC_SECONDS)
        except Exception:  # a stopped JVM: release what has arrived
            pass
        hold.release()


def launch_logged_gateway(conf: SparkConf, logger: logging.Logger) -> Any:
    """Launch the py4j JVM with its output piped into ``logger`` (see the module doc)."""
    from pyspark.java_gateway import launch_gateway

    global _routed
    gateway = launch_gateway(conf, popen_kwargs={"stdout": subprocess.PIPE, "stderr": subprocess.PIPE})
    _routed = True
    for stream in (gateway.proc.stdout, gateway.proc.stderr):
        threading.Thread(target=_forward, args=(stream, logger), name="spark-jvm-log", daemon=True).start()
    return gateway
