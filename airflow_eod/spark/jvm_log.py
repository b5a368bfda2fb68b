"""The Spark JVM's own log lines, at their real levels, in the task's Python log.

A task's stderr reaches Airflow's task log as ``level=error`` lines whatever they say, so
Spark's WARNs (and its INFOs, with another log4j setting) read as errors. A JVM launched
here writes its stdout and stderr into pipes instead; a thread reads them and logs each
line through Python's logging at the level log4j printed (``WARN`` as ``WARNING``), with
the lines that continue an entry (a stack trace) at that entry's level.
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkConf

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


def launch_logged_gateway(conf: SparkConf, logger: logging.Logger) -> Any:
    """Launch the py4j JVM with its output piped into ``logger`` (see the module doc)."""
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(conf, popen_kwargs={"stdout": subprocess.PIPE, "stderr": subprocess.PIPE})
    for stream in (gateway.proc.stdout, gateway.proc.stderr):
        threading.Thread(target=_forward, args=(stream, logger), name="spark-jvm-log", daemon=True).start()
    return gateway
