"""What every benchmark area shares: the result row, timing statistics, the SparkSession,
the machine description, and the benchmark's own settings (full or QUICK).

A row is one figure: ``{area, figure, value, unit, target, ratio, note}`` plus the verdict
(``PASS``/``MISS`` when the figure has a target, empty when it is for information).
Targets are checked here, against numbers measured in the same run; nothing is asserted.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"
# The Delta Spark jars (a comma-separated list of paths): the engines area needs them.
DELTA_SPARK_JARS_ENV = "EOD_DELTA_SPARK_JARS"


@dataclass
class Row:
    """One printed figure.

    :param area: ``ask``, ``commit``, ``planning``, ``state``, ``load``, ``peer``.
    :param figure: what was measured, e.g. ``p50, newest batch, 10,000 batches``.
    :param value: the measured value (``None``: not measured, see ``note``).
    :param unit: ``ms``, ``s``, ``bytes``, ``files``, ``x``, ...
    :param target: the target in words, e.g. ``<= 10 ms; <= 2x @100``.
    :param ratio: against the baseline named in ``target`` or ``note``, measured in this run.
    :param note: how it was measured, or why it was not.
    :param status: ``PASS``, ``MISS`` or empty (no target).
    """

    area: str
    figure: str
    value: float | None
    unit: str
    target: str = ""
    ratio: float | None = None
    note: str = ""
    status: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def row(
    area: str,
    figure: str,
    value: float | None,
    unit: str,
    *,
    limit: float | None = None,
    ratio: float | None = None,
    ratio_limit: float | None = None,
    baseline: str = "",
    note: str = "",
) -> Row:
    """A row, with its target and verdict.

    :param limit: the value must be ``<=`` this (in ``unit``).
    :param ratio: the value against ``baseline``.
    :param ratio_limit: the ratio must be ``<=`` this.
    """
    targets: list[str] = []
    checks: list[bool] = []
    if limit is not None:
        targets.append(f"<= {limit:g} {unit}")
        checks.append(value is not None and value <= limit)
    if ratio_limit is not None:
        targets.append(f"<= {ratio_limit:g}x {baseline}".rstrip())
        checks.append(ratio is not None and ratio <= ratio_limit)
    status = "" if not checks else ("PASS" if all(checks) else "MISS")
    if ratio is not None and ratio_limit is None and baseline:
        note = f"ratio vs {baseline}" + (f"; {note}" if note else "")
    return Row(area, figure, value, unit, "; ".join(targets), ratio, note, status)


def percentile(samples: list[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100) of ``samples``."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples`` (seconds) in milliseconds."""
    return statistics.median(samples) * 1000, percentile(samples, 99) * 1000


def ratio_of(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def timed(fn: Callable[[], Any], reps: int, warmup: int = 0) -> list[float]:
    """Seconds per call of ``fn`` over ``reps`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    """``with stopwatch() as t: ...``; ``t[0]`` holds the seconds afterwards."""
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def fmt_int(n: int) -> str:
    return f"{n:,}"


AREAS = ("history", "load", "peer", "engines", "merge", "objectstore", "kafka")


@dataclass
class Settings:
    """How much to run: ``full()`` is the issue's set, ``quick()`` a reduced one, ``smoke()``
    every area at toy sizes (figures meaningless; CI runs it so a refactor cannot break the
    benchmark unseen)."""

    mode: str
    checkpoints: list[int]  # batch counts at which the history is measured
    state_checkpoints: list[int]  # batch counts at which state is reported
    asks: int  # timed asks per batch and checkpoint
    spark_asks: int
    window: int  # batches after a checkpoint whose plan and commit are timed
    jdbc_plans: int  # JDBC plans timed per checkpoint
    load_rows: list[int]
    load_pairs: int  # alternating (plain, eod) pairs per size and format
    increments: int
    increment_rows: int
    retention: str  # the short retention interval of the retention history
    engine_rows: list[int] = field(default_factory=lambda: [1_000_000, 10_000_000])
    engine_reps: int = 3  # rounds of (plain Delta write, delta-spark load, delta-rs load)
    # The object-store area (benchmarks/object_store.py): histories on S3, timed batches and
    # asks at each, and the load to S3 against plain Spark writes.
    store_checkpoints: list[int] = field(default_factory=lambda: [100, 1_000, 10_000])
    store_window: int = 50  # batches planned and committed on the store per checkpoint
    store_asks: int = 50  # cold asks of the oldest and of the newest batch per checkpoint
    store_rows: list[int] = field(default_factory=lambda: [1_000_000])
    store_reps: int = 3  # rotating rounds of (plain Parquet, plain Delta, eod) per size
    # The merge area (benchmarks/merge.py): the table's rows, and rounds of (airflow-eod merge
    # load, Delta Spark MERGE) per change batch.
    merge_rows: int = 10_000_000
    merge_reps: int = 1
    # The kafka area (benchmarks/kafka.py): records produced into a topic of that many
    # partitions in that many increments, each loaded by both sides.
    kafka_records: int = 1_000_000
    kafka_partitions: int = 8
    kafka_increments: int = 5
    areas: list[str] = field(default_factory=lambda: list(AREAS))

    @classmethod
    def full(cls) -> Settings:
        return cls(
            mode="full",
            checkpoints=[100, 1_000, 10_000],
            state_checkpoints=[1_000, 10_000],
            asks=200,
            spark_asks=10,
            window=200,
            jdbc_plans=30,
            load_rows=[1_000_000, 10_000_000],
            load_pairs=5,
            increments=20,
            increment_rows=10_000,
            retention="interval 5 seconds",
        )

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            mode="quick",
            checkpoints=[100, 1_000],
            state_checkpoints=[100, 1_000],
            asks=200,
            spark_asks=5,
            window=100,
            jdbc_plans=15,
            load_rows=[100_000, 1_000_000],
            load_pairs=5,
            increments=5,
            increment_rows=10_000,
            retention="interval 5 seconds",
            engine_rows=[100_000, 1_000_000],
            store_checkpoints=[100, 1_000],
            store_window=20,
            store_asks=20,
            store_rows=[100_000],
            merge_rows=1_000_000,
            kafka_records=100_000,
            kafka_partitions=4,
        )

    @classmethod
    def smoke(cls) -> Settings:
        return cls(
            mode="smoke",
            checkpoints=[5, 10],
            state_checkpoints=[5, 10],
            asks=3,
            spark_asks=1,
            window=3,
            jdbc_plans=2,
            load_rows=[2_000],
            load_pairs=1,
            increments=2,
            increment_rows=400,
            retention="interval 5 seconds",
            engine_rows=[2_000],
            engine_reps=1,
            store_checkpoints=[5, 10],
            store_window=2,
            store_asks=2,
            store_rows=[2_000],
            store_reps=1,
            merge_rows=5_000,
            kafka_records=400,
            kafka_partitions=2,
            kafka_increments=2,
        )


def spark_session() -> SparkSession:
    """The SparkSession every area uses: the provider's own settings
    (:func:`airflow_eod.spark.session.get_session`), plus the PostgreSQL JDBC driver, the
    Delta Spark jars and SQL extension where EOD_DELTA_SPARK_JARS names the jars (the engines
    area), and the s3a jars on the driver's class path where they are cached (the objectstore
    area; a session takes no jar after it started)."""
    from airflow_eod.spark.session import get_session
    from tests.support.spark_conf import find_s3a_jars, session_conf

    find_s3a_jars()  # sets EOD_S3A_JARS when `make test` fetched them; the area says why not otherwise
    find_delta_spark_jars()  # the engines and merge areas; each says why not where they are missing
    conf = {**session_conf(POSTGRES_JDBC_JAR, s3a=True), "spark.ui.showConsoleProgress": "false"}
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    spark = get_session(conf=conf, app_name="airflow-eod-bench")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def find_delta_spark_jars() -> None:
    """Put the Delta Spark jars ``make jars`` fetched into the cache in EOD_DELTA_SPARK_JARS,
    unless it names jars already (as ``tests/conftest.py`` does for the tests)."""
    if os.environ.get(DELTA_SPARK_JARS_ENV):
        return
    from airflow_eod.spark.jars import JarFetchError, cached, delta_spark_jars

    try:
        paths = cached(delta_spark_jars())
    except JarFetchError:
        return
    if paths:
        os.environ[DELTA_SPARK_JARS_ENV] = ",".join(paths)


def _first_line(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = (done.stdout + done.stderr).strip()
    return text.splitlines()[0] if text else "unknown"


def _meminfo_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(spark: SparkSession | None) -> dict[str, Any]:
    """What the run ran on, read from the run itself."""
    import deltalake
    import pyarrow
    import pyspark

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    info: dict[str, Any] = {
        "cores": os.cpu_count(),
        "ram_gib": _meminfo_gib(),
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": _first_line(["java", "-version"]),
        "pyspark": pyspark.__version__,
        "deltalake": deltalake.__version__,
        "pyarrow": pyarrow.__version__,
        "load_average_at_start": list(os.getloadavg()),
        "commit": _first_line(["git", "-C", repo, "rev-parse", "--short", "HEAD"]),
        "working_tree_changes": len(
            subprocess.run(
                ["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
            ).stdout.splitlines()
        ),
    }
    if spark is not None:
        info["spark_master"] = spark.sparkContext.master
        info["spark_default_parallelism"] = spark.sparkContext.defaultParallelism
    return info
