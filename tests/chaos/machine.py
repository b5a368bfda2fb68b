"""The chaos state machine: Hypothesis invents a history, the harness injects faults into it,
and at the end every pipeline is driven until it has nothing left to load and the checker
compares the table with what the world wrote.

A trial is one run of the machine: a fresh table fed by four pipelines (an offset pipeline
over one landing directory, an interval pipeline whose directory is rendered from the
interval, and two mapped instances of another one; their own tables for a drifting
offset pipeline and, with PostgreSQL, a JDBC offset and a JDBC interval pipeline), a random
history of landings, input changes, row changes below the JDBC frontier, loads, backfills,
restatements, zombies, SIGKILLs and another writer's maintenance (delta-rs's, and with the
Delta Spark jars Delta Spark's statements, ``tests/chaos/spark_writer.py``), then the drain (faults
stop, every failed run is cleared and retried, a batch whose input changed is re-frozen, as
docs/runbook.md says) and the checks. Hypothesis
shrinks a failing history and replays it from its seed.

The loads run with the ``delta-rs`` engine, or (``SPARK["engine"]``: ``delta-spark``, or
``mixed`` for a coin per pipeline and trial) with the ``delta-spark`` engine for the pipelines
it can load: those without a quarantine (the JDBC ones, and the offset pipeline, whose files
then carry no malformed records) and not restating (the engine refuses restatement; a
restating run of such a pipeline runs with ``delta-rs``, on the same markers).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from airflow_eod.core import errors as eod_errors
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import (
    BatchError,
    ConfigurationError,
    EodError,
    InputChangedError,
    RetentionWindowError,
)
from airflow_eod.core.faults import ENV_VAR, POINTS, InjectedFault
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.settle import settle_committed
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, ReadContext
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_spec import LoadSettings
from tests.chaos.children import CHILDREN
from tests.chaos.jdbc_world import JdbcHistory, day_time, keyed
from tests.chaos.oracle import check_jdbc_batches, check_tables
from tests.chaos.report import REPORT
from tests.chaos.spark_writer import FOREIGN_DML, MAINTENANCE, ForeignRows, SparkWriter
from tests.chaos.store import (
    LandingMirror,
    delta,
    exists,
    landing_on_s3,
    landing_source_args,
    on_s3,
    quarantine_ref,
    ref,
    remove_world,
    table_uri,
)
from tests.chaos.world import DDL, OPTIONAL, PARTS, REQUIRED, World

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The SparkSession the in-process attempts share, the PostgreSQL server of the JDBC pipeline
# (``None``: no JDBC pipeline), whether Delta Spark is another writer (``delta_spark``: the
# session has its jars) and the loads' engine (``engine``: ``delta-rs``, ``delta-spark`` or
# ``mixed``); the runner (test or script) sets them.
SPARK: dict[str, Any] = {}
ENGINES = ("delta-rs", "delta-spark", "mixed")
# The pipelines the delta-spark engine can load (no quarantine: the engine refuses one).
SPARK_ENGINE_PIPES = ("off", "jdbc", "jdbci")
# The fault points a delta-spark try reaches (it stages nothing and writes no record).
SPARK_ENGINE_POINTS = {"after_plan", "reading_writing", "before_commit", "after_commit"}
BASE = datetime(2026, 1, 1, tzinfo=UTC)
DAYS = 5
# Where an in-process attempt may die (the InjectedFault stands for the process dying).
RAISE_POINTS = list(POINTS)  # every one of them
# Where a child attempt is SIGKILLed: a named point, or a random moment of the read and
# write (a timer started at ``before_write`` and, should the write be quicker than the timer,
# ``after_commit`` at the latest). Each entry: the points the try must reach for it to land.
KILL_PHASES = {
    "after_plan": "after_plan=kill",
    "reading_writing": "before_write=killafter:{delay},after_commit=kill",
    "after_stage": "after_stage=kill",
    "before_commit": "before_commit=kill",
    "before_record": "before_record=kill",
    "after_commit": "after_commit=kill",
}
# A try that finds its batch committed reaches only the freeze.
FREEZE_ONLY = ["after_plan"]
ZOMBIE_POINTS = ["after_stage", "before_commit", "before_record"]
KILL = "KILL:"
INTERVAL_PIPES = ["int", "m0", "m1"]
ALL_PIPES = ["off", *INTERVAL_PIPES]
DICE = st.integers(0, 2**32 - 1)
# The refusal of a JDBC interval that overlaps one the pipeline committed or froze (issue 18,
# item 1); ``None`` on a tree that does not have it yet (then the overlap loads, and the
# checker reports the rows it loaded twice).
OVERLAP_ERROR: type[Exception] | None = getattr(eod_errors, "OverlappingIntervalError", None)
# Changes to rows below the frontier (tests/chaos/jdbc_world.py).
JDBC_CHANGES = ["update", "delete", "reinsert", "null_key"]
# Recent in-process tries that committed, in seconds: a timer aimed at the write lands within it.
WRITE_SECONDS: list[float] = []


def _typical_write_seconds() -> float:
    recent = sorted(WRITE_SECONDS[-40:])
    return recent[len(recent) // 2] if recent else 0.5


SHORT_RETENTION = {
    "delta.setTransactionRetentionDuration": "interval 3 seconds",
    "delta.logRetentionDuration": "interval 2 seconds",
    "delta.checkpointInterval": "4",
}


class _RaceWatch(logging.Handler):
    """Counts the loser's path of a commit race, so a race test shows the race happened."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lost = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "lost a race" in text or "created the table first" in text:
            self.lost += 1
        if "computing the merge again" in text:
            # A merge lost to another writer of its files (tests/chaos/merge_machine.py).
            REPORT.count("events", "merge_recomputed_after_a_conflict")


RACES = _RaceWatch()  # attached to the airflow_eod logger while trials run (tests/chaos/run.py)


@dataclass
class Pipe:
    """One pipeline of the trial."""

    name: str
    pipeline_id: str
    boundary: str
    root: str


@dataclass
class Run:
    """One DAG run: its tries share the run token."""

    pipe: Pipe
    token: str
    interval: tuple[datetime, datetime] | None = None
    restate: bool = False
    restate_key: str | None = None
    since: int = 0  # the source's snapshot when the run began (JDBC pipelines)
    tried: bool = False  # a try of the run has started (it may have frozen the batch)
    done: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def zero_length(self) -> bool:
        return self.interval is not None and self.interval[0] == self.interval[1]


def _key_of(exc: BatchError) -> str | None:
    return exc.batch.split("/", 1)[1] if exc.batch and "/" in exc.batch else None


def _refrozen_by_runbook(exc: BaseException) -> bool:
    """Errors whose documented way out is to re-freeze (restate) the batch."""
    if isinstance(exc, InputChangedError | RetentionWindowError):
        return True
    return isinstance(exc, BatchError) and "gone before their commit" in str(exc)


def _documented_refusal(exc: BaseException) -> str | None:
    """Refusals docs/guarantee.md lists as limits: the run ends, nothing is committed."""
    text = str(exc)
    if isinstance(exc, ConfigurationError) and "zero-length" in text.lower():
        return "zero_length_interval"
    if isinstance(exc, BatchError) and "no longer live" in text:
        return "restate_after_optimize"
    if isinstance(exc, BatchError) and "a restatement cannot add columns" in text:
        return "restate_adding_columns"
    if isinstance(exc, InputChangedError) and "never restated without one of its files" in text:
        return "restate_with_a_file_gone"
    if isinstance(exc, BatchError) and "commit record and the commit itself are gone" in text:
        return "restate_without_record"
    if OVERLAP_ERROR is not None and isinstance(exc, OVERLAP_ERROR):
        return "overlapping_interval"
    return None


def _overlaps(a: tuple[datetime, datetime], b: tuple[datetime, datetime]) -> bool:
    return a != b and a[0] < b[1] and b[0] < a[1]


class ChaosMachine(RuleBasedStateMachine):
    """One trial: a history of loads and faults against one table."""

    salt = 0  # the chunk's seed (see tests/chaos/run.py)

    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="eod-chaos-")
        # The tables: in ``tmp``, or under the run's prefix on S3 (tests/chaos/store.py).
        self.table = table_uri(self.tmp, "table")
        self.jdbc_table = table_uri(self.tmp, "jdbc_table")
        self.drift_table = table_uri(self.tmp, "drift_table")
        self.pg = SPARK.get("postgres")
        self.jdbc_name = f"chaos_{os.path.basename(self.tmp).replace('-', '_').lower()}"
        self.jdbc_key = 0
        self.jdbci_table = table_uri(self.tmp, "jdbci_table")
        # Intervals of the JDBC interval pipeline a try may have frozen: what an overlapping
        # interval is refused for.
        self.jdbci_frozen: list[tuple[datetime, datetime]] = []
        self.jdbci_due: set[str] = set()
        # A load into an object store refuses a quarantine (core/options.check_object_store_load):
        # on S3 no pipeline has one, and no landing file carries a malformed record.
        self.quarantine: str | None = None if on_s3() else os.path.join(self.tmp, "quarantine")
        self.runs: list[Run] = []
        self.tries = 0
        self.tokens = 0
        self.armed: dict[int, str] = {}
        self.arm_lock = threading.Lock()
        self.planned_dirs: set[str] = set()
        self.committed_keys: dict[str, set[str]] = {}
        self.waits = 0
        self.kills = 0
        self.kill_percent = int(os.environ.get("EOD_CHAOS_KILL_PERCENT", "15"))
        self.max_kills = int(os.environ.get("EOD_CHAOS_MAX_KILLS", "6"))
        self.problems: list[str] = []
        self.seed = 0
        self.step = 0

    # -- set-up --------------------------------------------------------------------
    @initialize(seed=DICE)
    def setup(self, seed: int) -> None:
        # Salted by the chunk: Hypothesis starts every run with seed 0 and repeats values.
        self.seed = (seed + self.salt * 2_654_435_761) % 2**63
        self.rng = random.Random(self.seed)
        short, max_files, kill_roll = self.rng.random() < 0.5, self.rng.randint(1, 3), self.rng.randrange(100)
        # SIGKILLs cost a JVM each: a share of the trials (EOD_CHAOS_KILL_PERCENT), with either
        # retention, spend up to EOD_CHAOS_MAX_KILLS. The killed try runs in a warm child (its
        # JVM started ahead, tests/chaos/children.py), so it plans, passes the retention check
        # and writes within the short window; its retry, seconds later, may find the plan too
        # old, and the drain re-freezes it as the runbook says (RetentionWindowError).
        self.kill_budget = self.max_kills if kill_roll < self.kill_percent else 0
        # On S3 too: a value Spark leaves as it is (a space, non-ASCII) is staged under its
        # plain-ASCII spelling by a copy and a delete (airflow_eod/spark/staging.py).
        self.parts = PARTS
        mirror = LandingMirror(tmp=self.tmp) if landing_on_s3() else None
        self.world = World(os.path.join(self.tmp, "landing"), self.rng, self.parts, mirror)
        self.config = dict(SHORT_RETENTION) if short else {}
        if short and (SPARK.get("delta_spark") or SPARK.get("engine", "delta-rs") != "delta-rs"):
            # Delta Spark refuses every write to a table whose log retention is shorter than
            # its deleted-file retention (7 days by default): a short-retention trial's tables
            # keep tombstones for less than their 2 seconds of log.
            self.config["delta.deletedFileRetentionDuration"] = "interval 1 seconds"
        self.short = short
        self.max_files = max_files
        land = self.world.root
        self.pipes = {
            "off": Pipe("off", "chaos.off", "offsets", os.path.join(land, "off")),
            "int": Pipe("int", "chaos.int", "interval", os.path.join(land, "int")),
            "m0": Pipe("m0", "chaos.map.m0", "interval", os.path.join(land, "map0")),
            "m1": Pipe("m1", "chaos.map.m1", "interval", os.path.join(land, "map1")),
            # New columns in some files, added to its own table under schema_drift="add_columns".
            "drift": Pipe("drift", "chaos.drift", "offsets", os.path.join(land, "drift")),
        }
        for name in ("off", "drift"):
            self._folder(self.pipes[name].root)
        self.all_pipes = [*ALL_PIPES, "drift"]
        if self.pg is not None:
            self.pipes["jdbc"] = Pipe("jdbc", "chaos.jdbc", "offsets", self.jdbc_name)
            # A timestamp key over days, loaded by (daily, and odd) intervals.
            self.pipes["jdbci"] = Pipe("jdbci", "chaos.jdbci", "interval", self.jdbc_name + "_ts")
            self.all_pipes += ["jdbc", "jdbci"]
            self.jdbc_batch = self.rng.choice([None, 2, 5])
            self.jdbc_hist = JdbcHistory(self.pg, self.jdbc_name, "k", self.parts)
            self.jdbc_hist.create("bigint")
            self.jdbci_hist = JdbcHistory(self.pg, self.jdbc_name + "_ts", "ts", self.parts)
            self.jdbci_hist.create("timestamp")
        REPORT.count("events", "short_retention" if short else "default_retention")
        self.foreign = ForeignRows()
        self.spark_writer = SparkWriter(SPARK["session"], self.foreign) if SPARK.get("delta_spark") else None
        engine = SPARK.get("engine", "delta-rs")
        if on_s3() and (engine != "delta-rs" or self.spark_writer is not None):
            # A table on an object store refuses the delta-spark engine (Delta Spark's S3 log
            # store is safe for one driver only), and for that reason Delta Spark is no other
            # writer of one either: benchmarks/chaos.py refuses the combination.
            raise ValueError("chaos on S3 runs with engine delta-rs and without Delta Spark as a writer")
        eligible = [p for p in SPARK_ENGINE_PIPES if p in self.pipes]
        if engine == "delta-spark":
            self.spark_pipes = set(eligible)
        elif engine == "mixed":
            self.spark_pipes = {p for p in eligible if self.rng.random() < 0.5}
        else:
            self.spark_pipes = set()
        for p in sorted(self.spark_pipes):
            REPORT.count("events", f"{p}_loads_with_delta_spark")

    def engine_for(self, run: Run) -> str:
        """The engine of ``run``'s tries: restatements always with delta-rs (the delta-spark
        engine refuses them; both engines write and read the same markers)."""
        return "delta-spark" if run.pipe.name in self.spark_pipes and not run.restate else "delta-rs"

    def rejects(self, pipe: str) -> bool:
        """Whether ``pipe``'s files may carry malformed records: only where its loads have a
        quarantine (the delta-spark engine and a table on an object store have none)."""
        return pipe not in self.spark_pipes and self.quarantine is not None

    @invariant()
    def count_step(self) -> None:
        REPORT.steps += 1
        self.step += 1

    def dice(self, dice: int) -> random.Random:
        """The choices of one step: its dice mixed with the trial's seed and the step number
        (Hypothesis draws the same small dice often, above all in its first trials)."""
        return random.Random(self.seed * 1_000_003 + self.step * 7_919 + dice)

    # -- helpers -------------------------------------------------------------------
    def day_dir(self, pipe: Pipe, start: datetime) -> str:
        return os.path.join(pipe.root, start.strftime("%Y-%m-%d"))

    def target(self, pipe: Pipe) -> str:
        tables = {"jdbc": self.jdbc_table, "jdbci": self.jdbci_table, "drift": self.drift_table}
        return tables.get(pipe.name, self.table)

    def credentials(self, pipe: Pipe) -> Credentials | None:
        return Credentials(self.pg.user, self.pg.password) if pipe.name in ("jdbc", "jdbci") else None

    def source(self, pipe: Pipe, interval: tuple[datetime, datetime] | None) -> Any:
        if pipe.name == "jdbc":
            return JdbcIncrementalSource(
                url=self.pg.jdbc_url, table=self.jdbc_name, key_column="k", max_rows_per_batch=self.jdbc_batch
            )
        if pipe.name == "jdbci":
            return JdbcIncrementalSource(
                url=self.pg.jdbc_url,
                table=pipe.root,
                key_column="ts",
                key_type="timestamp",
                boundary="interval",
            )
        # The local directory, or its copy on S3 (``--landing-store s3``, tests/chaos/store.py).
        if landing_on_s3():
            REPORT.count("events", "landing_source_on_s3")  # the run checks it read from there
        if pipe.boundary == "offsets":
            return LandingFilesSource(
                **landing_source_args(self.tmp, pipe.root),
                file_format="csv",
                schema=DDL,
                max_files_per_batch=self.max_files,
            )
        assert interval is not None
        return LandingFilesSource(
            **landing_source_args(self.tmp, self.day_dir(pipe, interval[0])),
            file_format="csv",
            schema=DDL,
            boundary="interval",
        )

    def new_run(
        self,
        pipe: Pipe,
        interval: tuple[datetime, datetime] | None = None,
        *,
        restate: bool = False,
        key: str | None = None,
    ) -> Run:
        self.tokens += 1
        run = Run(pipe, f"{pipe.name}-run-{self.tokens}", interval, restate, key)
        if pipe.name in ("jdbc", "jdbci"):
            run.since = len(self.hist(pipe).snapshots) - 1
        if interval is not None and pipe.name in INTERVAL_PIPES:
            self._folder(self.day_dir(pipe, interval[0]))
        self.runs.append(run)
        return run

    def _folder(self, path: str) -> None:
        """The landing directory ``path`` exists (on S3 too: its folder marker)."""
        os.makedirs(path, exist_ok=True)
        if self.world.mirror is not None:
            self.world.mirror.folder(path)

    def _arm(self, try_no: int, spec: str | None) -> None:
        with self.arm_lock:
            if spec:
                self.armed[try_no] = spec
            else:
                self.armed.pop(try_no, None)
            parts = [f"{s}@{t}" for t, s in self.armed.items()]
            if parts:
                os.environ[ENV_VAR] = ",".join(parts)
            else:
                os.environ.pop(ENV_VAR, None)

    def _request(self, run: Run, try_no: int) -> tuple[LoadRequest, Any, dict[str, Any]]:
        request = LoadRequest(
            ref(self.target(run.pipe)),
            run.pipe.pipeline_id,
            run.token,
            interval=run.interval,
            restate=run.restate,
            restate_batch_key=run.restate_key,
            try_number=try_no,
        )
        settings = {
            "run_id": run.token,
            "try_number": try_no,
            "partition_by": ["part"],
            "quarantine_table_uri": None
            if run.pipe.name in ("jdbc", "jdbci", "drift") or run.pipe.name in self.spark_pipes
            else self.quarantine,
            "schema_drift": "add_columns" if run.pipe.name == "drift" else "fail",
            "table_configuration": self.config,
            "engine": self.engine_for(run),
        }
        return request, self.source(run.pipe, run.interval), settings

    def _before_attempt(self, run: Run) -> None:
        if run.interval is not None and not run.zero_length:
            self.planned_dirs.add(self.day_dir(run.pipe, run.interval[0]))

    def attempt(self, run: Run, fault: str | None = None) -> BaseException | None:
        """One try of ``run`` in this process; ``fault`` is ``point=action`` for this try."""
        with self.arm_lock:
            self.tries += 1
            try_no = self.tries
        REPORT.count("events", "attempt")
        REPORT.attempts += 1
        self._before_attempt(run)
        run.tried = True
        request, source, settings = self._request(run, try_no)
        spark = SPARK["session"]
        target, creds = self.target(run.pipe), self.credentials(run.pipe)
        frozen_before = list(self.jdbci_frozen)
        self._arm(try_no, fault)
        started = time.monotonic()
        try:
            result = load_batch(
                request,
                source,
                ReadContext(spark_factory=lambda: spark, credentials=creds),
                run=local_run(
                    lambda: spark,
                    ref(target),
                    source,
                    credentials=creds,
                    settings=LoadSettings(**settings),
                ),
                settle=lambda status: settle_committed(
                    ref(target), status, quarantine_ref(ref(target), settings["quarantine_table_uri"])
                ),
            )
        except InjectedFault as exc:
            if run.pipe.name == "jdbci" and run.interval is not None:
                self.jdbci_frozen.append(run.interval)
            return exc
        except EodError as exc:
            refusal = _documented_refusal(exc)
            if refusal == "overlapping_interval":
                self._check_overlap_refusal(run, frozen_before, exc)
            elif run.pipe.name == "jdbci" and run.interval is not None:
                self.jdbci_frozen.append(run.interval)
            REPORT.count("refusals", refusal or type(exc).__name__)
            REPORT.samples.setdefault(refusal or type(exc).__name__, str(exc))
            run.errors.append(f"{type(exc).__name__}: {exc}")
            if refusal is None and not _refrozen_by_runbook(exc):
                # Nothing in the history calls for this error: a user would read it as a fault.
                REPORT.unclear_errors += 1
                self.problems.append(f"unexpected error from {run.token}: {type(exc).__name__}: {exc}")
            return exc
        except Exception as exc:  # an error airflow-eod did not raise on purpose
            REPORT.unclear_errors += 1
            REPORT.samples.setdefault(type(exc).__name__, str(exc))
            self.problems.append(f"unclear error from {run.token}: {type(exc).__name__}: {exc}")
            return exc
        finally:
            self._arm(try_no, None)
        if run.pipe.name == "jdbci" and run.interval is not None:
            self.jdbci_frozen.append(run.interval)
            if result.batch_key:
                self.jdbci_due.add(result.batch_key)
        if result.outcome == "committed":
            WRITE_SECONDS.append(time.monotonic() - started)
            REPORT.count("events", f"committed_by_{settings['engine']}")
            self._check_null_key_rows(run, result)
        REPORT.count("outcomes", result.outcome)
        if result.batch_key:
            self.committed_keys.setdefault(run.pipe.name, set()).add(result.batch_key)
        run.done = True
        return None

    def hist(self, pipe: Pipe) -> JdbcHistory:
        return self.jdbci_hist if pipe.name == "jdbci" else self.jdbc_hist

    def _check_overlap_refusal(
        self, run: Run, frozen: list[tuple[datetime, datetime]], exc: Exception
    ) -> None:
        """An interval refused as overlapping must overlap one a try froze before."""
        assert run.interval is not None
        if run.pipe.name != "jdbci" or not any(_overlaps(run.interval, iv) for iv in frozen):
            REPORT.unclear_errors += 1
            self.problems.append(f"{run.token} {run.interval} refused, overlaps nothing: {exc}")

    def _check_null_key_rows(self, run: Run, result: Any) -> None:
        """A JDBC load's result counts the rows whose key is NULL (never loaded)."""
        if run.pipe.name not in ("jdbc", "jdbci"):
            return
        counted = getattr(result, "null_key_rows", None)
        if counted is None:
            if run.restate:  # a retry of a restating run finds the generation it froze: no count
                REPORT.count("events", "null_key_rows_not_on_a_restatement_retry")
                return
            REPORT.count("events", "null_key_rows_not_on_result")
            self.problems.append(f"{run.token}: a committed JDBC load without null_key_rows")
            return
        REPORT.count("events", "null_key_rows_checked")
        held = self.hist(run.pipe).null_counts_since(run.since)
        if counted not in held:
            self.problems.append(
                f"{run.token}: null_key_rows {counted}, the source held {sorted(held)} NULL-key rows"
            )

    def dag_run(self, run: Run, fault: str | None = None, retries: int = 2) -> BaseException | None:
        """A run with Airflow's retries: the first try may carry a fault, and a SIGKILL fault
        runs that try in a child process of its own. The fault a SIGKILL stands for (a
        worker's OOM, a lost node) may strike the first retry again; the last try is left."""
        err: BaseException | None = None
        for i in range(retries + 1):
            again = i == 1 and fault is not None and fault.startswith(KILL) and self.kill_again(run)
            if (i == 0 and fault is not None and fault.startswith(KILL)) or again:
                assert fault is not None
                self.killed_try(run, fault[len(KILL) :] if i == 0 else self.draw_kill(run))
                if run.done:
                    return None
                continue
            err = self.attempt(run, fault if i == 0 else None)
            if err is None or _documented_refusal(err):
                return err
        return err

    def kill_again(self, run: Run) -> bool:
        """Whether the retry of a SIGKILLed try is SIGKILLed too (one in three, while the
        trial's budget lasts)."""
        if self.kills >= self.kill_budget:
            return False
        return random.Random(self.seed * 31 + self.tries).random() < 1 / 3

    def draw_kill(self, run: Run) -> str:
        self.kills += 1
        r = random.Random(self.seed * 37 + self.tries)
        return f"{r.random():.6f}|{r.random():.6f}"

    def draw_fault(self, r: random.Random) -> str | None:
        """A fault for a run's first try: none in two of five, else a raise at any boundary,
        or, in a trial with a SIGKILL to spend, the SIGKILL of a child process."""
        if r.random() < 0.4:
            return None
        # In an armed trial three faults in four are SIGKILLs: a tenth of all load attempts
        # and more (retries and the drain's tries are attempts too, never killed).
        if self.kills < self.kill_budget and r.random() < 0.75:
            self.kills += 1
            # Where it lands is chosen once the try's run is known (killed_try): among the
            # points that try reaches.
            return f"{KILL}{r.random():.6f}|{r.random():.6f}"
        name = r.choice(RAISE_POINTS)
        REPORT.count("faults", f"raise@{name}")
        return f"{name}=raise"

    def interval_for(self, day: int, kind: str, hours: int = 12) -> tuple[datetime, datetime]:
        start = BASE + timedelta(days=day)
        if kind == "midday":
            # A manual run with a logical date in the middle of the day.
            return start + timedelta(hours=hours), start + timedelta(days=1, hours=hours)
        if kind == "overlap":
            return start, start + timedelta(days=2)
        if kind == "zero":
            return start, start
        return start, start + timedelta(days=1)

    def _run_for(self, r: random.Random, pipe: Pipe) -> Run:
        if pipe.boundary == "offsets":
            return self.new_run(pipe)
        return self.new_run(pipe, self.interval_for(r.randrange(DAYS), "daily"))

    # -- the sources -----------------------------------------------------------------
    # Hypothesis picks the rules and a ``dice`` per step; the choices inside a step come
    # from ``random.Random(dice)``, uniform from the first trial on (Hypothesis starts its
    # draws small and simple), and replayed exactly from the seed.
    @rule(dice=DICE)
    def land_offsets_file(self, dice: int) -> None:
        r = self.dice(dice)
        late = r.random() < 0.3
        # The delta-spark engine has no quarantine: its offset pipeline's files are clean.
        bad = 1 if r.random() < 0.2 and self.rejects("off") else 0
        self.world.land(self.pipes["off"].root, r.randrange(6), n_bad=bad, hidden=r.random() < 0.1, late=late)
        REPORT.count("events", "land_offsets" + ("_late" if late else ""))
        if bad:
            REPORT.count("events", "malformed_records")

    @rule(dice=DICE)
    def land_interval_file(self, dice: int) -> None:
        r = self.dice(dice)
        pipe, day = r.choice(INTERVAL_PIPES), r.randrange(DAYS)
        self._land_interval(pipe, day, r.randrange(5), int(r.random() < 0.2))

    def _land_interval(self, pipe: str, day: int, rows: int, bad: int) -> None:
        directory = self.day_dir(self.pipes[pipe], BASE + timedelta(days=day))
        bad = bad if self.rejects(pipe) else 0
        # A file that lands after its interval was planned is late: only a restatement loads it.
        expect = OPTIONAL if directory in self.planned_dirs else REQUIRED
        self.world.land(directory, rows, n_bad=bad, expect=expect)
        REPORT.count("events", "land_interval" + ("_late" if expect == OPTIONAL else ""))
        if bad:
            REPORT.count("events", "malformed_records")

    def _offsets_files(self) -> list[Any]:
        return [s for s in self.world.files_in(self.pipes["off"].root) if s.expect != "never"]

    @precondition(lambda self: bool(self._offsets_files()))
    @rule(dice=DICE)
    def change_offsets_input(self, dice: int) -> None:
        """A landing file rewritten in place, deleted, or moved to another name."""
        r = self.dice(dice)
        what = r.choice(["rewrite", "delete", "move"])
        getattr(self.world, what)(r.choice(self._offsets_files()))
        REPORT.count("events", f"input_{what}")

    def _insert(self, r: random.Random, n: int) -> None:
        keys = list(range(self.jdbc_key + 1, self.jdbc_key + n + 1))
        self.jdbc_key += n
        self.jdbc_hist.insert(keys, r)
        REPORT.count("events", "jdbc_insert", n)

    def _insert_ts(self, r: random.Random, n: int, day: datetime | int) -> None:
        """Rows of the interval pipeline's table at random moments of ``day`` (and the next)."""
        d = day if isinstance(day, int) else (day - BASE).days
        self.jdbci_hist.insert([day_time(BASE, d + r.randrange(2), r) for _ in range(n)], r)
        REPORT.count("events", "jdbc_ts_insert", n)

    @precondition(lambda self: self.pg is not None)
    @rule(dice=DICE)
    def change_jdbc_rows(self, dice: int) -> None:
        """An UPDATE, a DELETE, a DELETE and re-INSERT under the same key, or rows whose key
        is NULL, below the frontier (committed ranges keep their rows as committed)."""
        r = self.dice(dice)
        pipe = self.pipes[r.choice(["jdbc", "jdbci"])]
        hist, what = self.hist(pipe), r.choice(JDBC_CHANGES)
        if hist.apply(what, keyed(hist.now()), r):
            REPORT.count("events", f"{pipe.name}_{what}")

    @precondition(lambda self: self.pg is not None)
    @rule(dice=DICE)
    def jdbc_change_while_frozen(self, dice: int) -> None:
        """A batch frozen by a try that died, then a row of its range changed before the
        retry: the retry fails with InputChangedError and commits nothing; the drain
        re-freezes it (restate=True, restate_batch_key) and it loads the rows as they are."""
        r = self.dice(dice)
        pipe = self.pipes[r.choice(["jdbc", "jdbci"])]
        hist = self.hist(pipe)
        if pipe.name == "jdbc":
            first = self.jdbc_key + 1
            self._insert(r, r.randrange(1, 4))
            run = self.new_run(pipe)
            fresh = [row for row in keyed(hist.now()) if row[0] >= first]
        else:
            day = r.randrange(DAYS)
            self._insert_ts(r, r.randrange(1, 4), day)
            run = self.new_run(pipe, self.interval_for(day, "daily"))
            start, end = run.interval or (BASE, BASE)
            lo, hi = start.replace(tzinfo=None), end.replace(tzinfo=None)
            fresh = [row for row in keyed(hist.now()) if lo <= row[0] < hi]
        self.attempt(run, "after_plan=raise")
        what = r.choice(["update", "delete", "reinsert", "null_key"])
        if hist.apply(what, fresh, r):
            REPORT.count("events", f"{pipe.name}_{what}_while_frozen")
        self.dag_run(run)

    @precondition(lambda self: self.pg is not None)
    @rule(dice=DICE)
    def load_jdbc_interval(self, dice: int) -> None:
        """A JDBC interval run: daily, or a manual run with a mid-day logical date, whose
        interval overlaps the days around it (refused once one of them is frozen)."""
        r = self.dice(dice)
        day = r.randrange(DAYS)
        kind = r.choice(["daily", "daily", "midday"])
        self._insert_ts(r, r.randrange(4), day)
        REPORT.count("events", f"jdbc_interval_{kind}")
        run = self.new_run(self.pipes["jdbci"], self.interval_for(day, kind, r.randrange(1, 24)))
        self.dag_run(run, self.draw_fault(r))

    def refused_at_planning(self, run: Run) -> bool:
        """A JDBC interval that overlaps one a try froze is refused before anything runs."""
        if OVERLAP_ERROR is None or run.pipe.name != "jdbci" or run.interval is None:
            return False
        return any(_overlaps(run.interval, iv) for iv in self.jdbci_frozen)

    @precondition(lambda self: self.pg is not None)
    @rule(dice=DICE)
    def insert_jdbc_rows(self, dice: int) -> None:
        r = self.dice(dice)
        self._insert(r, r.randrange(1, 6))

    # -- loads ------------------------------------------------------------------------
    @rule(dice=DICE)
    def load_drift(self, dice: int) -> None:
        """Files of which some carry a column the declared schema lacks (schema_drift=add_columns)."""
        r = self.dice(dice)
        new = r.randrange(4)
        for _ in range(new):
            extra = r.random() < 0.4
            self.world.land(self.pipes["drift"].root, r.randrange(5), extra=extra, table="drift")
            REPORT.count("events", "land_new_column" if extra else "land_drift")
        self.dag_run(self.new_run(self.pipes["drift"]), self.draw_fault(r))

    @precondition(lambda self: self.pg is not None)
    @rule(dice=DICE)
    def load_jdbc(self, dice: int) -> None:
        r = self.dice(dice)
        self._insert(r, r.randrange(4))
        self.dag_run(self.new_run(self.pipes["jdbc"]), self.draw_fault(r))

    @rule(dice=DICE)
    def load_offsets(self, dice: int) -> None:
        r = self.dice(dice)
        new = r.randrange(4)
        for _ in range(new):
            bad = r.random() < 0.15 and self.rejects("off")
            self.world.land(self.pipes["off"].root, r.randrange(6), n_bad=int(bad))
        REPORT.count("events", "land_offsets", new)
        self.dag_run(self.new_run(self.pipes["off"]), self.draw_fault(r))

    @rule(dice=DICE)
    def load_interval(self, dice: int) -> None:
        """One interval run: daily, or overlapping the next day's, or zero-length (refused)."""
        r = self.dice(dice)
        pipe, day = r.choice(INTERVAL_PIPES), r.randrange(DAYS)
        kind = r.choice(["daily", "daily", "daily", "overlap", "zero", "midday"])
        REPORT.count("events", f"interval_{kind}")
        for _ in range(r.randrange(3)):
            self._land_interval(pipe, day, r.randrange(5), int(r.random() < 0.15))
        interval = self.interval_for(day, kind, r.randrange(1, 24))
        self.dag_run(self.new_run(self.pipes[pipe], interval), self.draw_fault(r))

    @rule(dice=DICE)
    def backfill_in_parallel(self, dice: int) -> None:
        """Intervals loaded newest first and at the same time, as a backfill does."""
        r = self.dice(dice)
        pipe = r.choice(INTERVAL_PIPES)
        days = r.sample(range(DAYS), r.randrange(2, 4))
        for d in days:
            for _ in range(r.randrange(3)):
                self._land_interval(pipe, d, r.randrange(5), 0)
        days.sort(reverse=True)
        runs = [self.new_run(self.pipes[pipe], self.interval_for(d, "daily")) for d in days]
        REPORT.count("events", "parallel_backfill")
        faults = [self.draw_fault(r) for _ in runs]
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            list(pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(len(runs))))

    def _restating_run(self, r: random.Random) -> Run | None:
        """A new run that restates one of the committed batches."""
        pipes = sorted(p for p, keys in self.committed_keys.items() if keys)
        if not pipes:
            return None
        pipe = r.choice(pipes)
        key = r.choice(sorted(self.committed_keys[pipe]))
        interval = None
        if key.startswith("i-"):
            match = [
                run
                for run in self.runs
                if run.pipe.name == pipe and not run.zero_length and _interval_key(run) == key
            ]
            if not match:
                return None
            interval = match[0].interval
        REPORT.count("events", "restatement")
        return self.new_run(self.pipes[pipe], interval, restate=True, key=key)

    @precondition(lambda self: any(self.committed_keys.values()))
    @rule(dice=DICE)
    def restate(self, dice: int) -> None:
        """Restate a committed batch on purpose; the first try may fail and is retried."""
        r = self.dice(dice)
        run = self._restating_run(r)
        if run is None:
            return
        err = self.dag_run(run, self.draw_fault(r))
        interval = run.interval
        if err is None and interval is not None:
            # The restatement re-froze the interval's directory as it is now: its late files load.
            for s in self.world.files_in(self.day_dir(run.pipe, interval[0])):
                if s.expect == OPTIONAL:
                    s.expect = REQUIRED

    @rule(dice=DICE)
    def zombie_and_retry(self, dice: int) -> None:
        """A try that stalls at a boundary while the retry of the same run starts and runs
        (sometimes of a restatement, sometimes with another writer's maintenance meanwhile)."""
        r = self.dice(dice)
        run = self._restating_run(r) if r.random() < 0.25 else None
        run = run or self._run_for(r, self.pipes[r.choice(self.all_pipes)])
        points = ["before_commit"] if self.engine_for(run) == "delta-spark" else ZOMBIE_POINTS
        point, pause = r.choice(points), r.uniform(0.2, 0.8)
        meanwhile = r.choice(["optimize", "vacuum", "checkpoint"]) if r.random() < 0.3 else None
        lost_before = RACES.lost
        REPORT.count("faults", f"zombie@{point}" + ("(restatement)" if run.restate else ""))
        with ThreadPoolExecutor(max_workers=2) as pool:
            zombie = pool.submit(self.attempt, run, f"{point}=sleep:{pause:.2f}")
            time.sleep(pause / 3)
            retry = pool.submit(self.attempt, run)
            if meanwhile is not None:
                time.sleep(pause / 3)
                if self.spark_writer is not None and r.random() < 0.5:
                    self.spark_op(r, self.target(run.pipe))
                else:
                    self.maintain(self.target(run.pipe), meanwhile)
            errors = [zombie.result(), retry.result()]
        if RACES.lost > lost_before:
            REPORT.count("events", "race_lost_by_one_attempt")
        for e in errors:
            if e is not None and not isinstance(e, EodError):
                self.problems.append(f"zombie race on {run.token}: {type(e).__name__}: {e}")

    def kill_points(self, run: Run) -> list[str]:
        """The kill phases the next try of ``run`` reaches: none for a run refused at
        planning, the freeze alone for a batch the table already holds, else all."""
        if run.zero_length or self.refused_at_planning(run):
            return []
        if run.interval is not None and not run.restate:
            if _interval_key(run) in self.committed_keys.get(run.pipe.name, set()):
                return FREEZE_ONLY
        if self.short and run.tried:
            # A retry seconds after its run froze the batch: the short window has passed, so
            # the try is refused (RetentionWindowError) after the freeze, before the write.
            return FREEZE_ONLY
        if self.engine_for(run) == "delta-spark":
            return sorted(SPARK_ENGINE_POINTS)
        return sorted(KILL_PHASES)

    def killed_try(self, run: Run, fault: str) -> None:
        """A try in a warm child process of its own (``tests/chaos/attempt.py``), SIGKILLed
        at a named point it reaches or at a random moment of its read and write."""
        pick, _, when = fault.partition("|")
        # New input first, so that the killed try has something to plan, write and commit
        # (not for a retry: its batch is frozen, and new rows in its range would change it).
        r = random.Random(self.seed + self.tries)
        if not run.tried:
            self.new_input_for(run, r)
        points = self.kill_points(run)
        if not points:
            REPORT.count("faults", "sigkill(no point this try reaches: run in-process)")
            self.attempt(run)
            return
        phase = points[min(int(float(pick) * len(points)), len(points) - 1)]
        # A timer lands within the write: at most most of the time a write took here lately.
        delay = float(when) * 0.8 * _typical_write_seconds()
        spec = KILL_PHASES[phase].format(delay=f"{delay:.3f}")
        with self.arm_lock:
            self.tries += 1
            try_no = self.tries
        REPORT.count("events", "attempt")
        self._before_attempt(run)
        _, source, settings = self._request(run, try_no)
        creds = self.credentials(run.pipe)
        args = {
            "table": self.target(run.pipe),
            "credentials": [creds.user, creds.password] if creds else None,
            "pipeline_id": run.pipe.pipeline_id,
            "run_token": run.token,
            "interval": [t.isoformat() for t in run.interval] if run.interval else None,
            "restate": run.restate,
            "restate_batch_key": run.restate_key,
            "try_number": try_no,
            "source": source.to_dict(),
            "settings": settings,
        }
        if run.pipe.name == "jdbci" and run.interval is not None:
            self.jdbci_frozen.append(run.interval)
        run.tried = True
        child = CHILDREN.take()
        code, outcome = child.run(args, spec)
        REPORT.attempts += 1
        if code == -9:
            REPORT.count("kills", phase)
            REPORT.count("events", f"sigkill_in_{'short' if self.short else 'default'}_retention")
            return
        REPORT.count("kills_missed", phase)
        if code == 0 and outcome is not None:
            REPORT.count("outcomes", outcome)
            run.done = True
        else:
            run.errors.append(f"child try ended {code}")
            REPORT.samples.setdefault(f"child try ended {code}", f"{run.token}: {spec}: {child.ended}")

    def new_input_for(self, run: Run, r: random.Random) -> None:
        """New input for ``run``'s pipeline, so that its try has something to load."""
        if run.pipe.name in ("jdbc", "jdbci") and threading.current_thread() is not threading.main_thread():
            return  # the source's history is written from one thread (its moments stay ordered)
        if run.pipe.name == "jdbc":
            self._insert(r, 3)
        elif run.pipe.name == "jdbci":
            self._insert_ts(r, 3, (run.interval or (BASE, BASE))[0])
        elif run.pipe.boundary == "offsets":
            self.world.land(run.pipe.root, 3, table="drift" if run.pipe.name == "drift" else "main")
        elif run.interval is not None and not run.restate:
            self._land_interval(run.pipe.name, (run.interval[0] - BASE).days, 3, 0)

    # -- other writers, time -----------------------------------------------------------
    @precondition(lambda self: exists(self.table))
    @rule(dice=DICE)
    def another_writer(self, dice: int) -> None:
        """Maintenance by another writer between attempts (with Delta Spark as a writer, half
        the time one of its statements instead)."""
        r = self.dice(dice)
        if self.spark_writer is not None and r.random() < 0.5:
            self.spark_op(r)
            return
        what = r.choice(["optimize", "vacuum", "checkpoint", "cleanup_log"])
        tables = self._tables()
        self.maintain(tables[0] if r.random() < 0.6 else r.choice(tables), what)

    def maintain(self, uri: str, what: str) -> None:
        if not exists(uri):
            return
        table = delta(uri)
        if what == "optimize" and any(not f.isascii() for f in table.file_uris()):
            # deltalake's (1.6) OPTIMIZE leaves a file Delta Spark wrote under a non-ASCII
            # partition value live beside its rewrite (it spells the remove percent-encoded):
            # every batch row in it twice. A defect of deltalake's, stated in
            # docs/guarantee.md; airflow-eod's own files are plain ASCII on disk.
            REPORT.count("events", "writer_optimize_skipped_deltalake_defect")
            return
        if what == "optimize":
            table.optimize.compact()
        elif what == "vacuum":
            table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        elif what == "checkpoint":
            table.create_checkpoint()
        else:
            table.create_checkpoint()
            table.cleanup_metadata()
        REPORT.count("faults", f"writer_{what}")

    def dml_rewrite(self, uri: str, kind: str) -> bool:
        """Whether an audit error is verify's documented report of a Delta Spark DELETE,
        UPDATE or MERGE that rewrote batch files (docs/runbook.md, ``batch_file_not_live``):
        verify cannot tell a rewrite that kept a batch's rows from one that changed them, so
        it reports both. Counted (``verify_batch_file_not_live_after_delta_spark_dml``), not
        a failure, when the checker found every row in place; issue 19 calls it a false
        alarm, and it is reported as such."""
        writer = self.spark_writer
        if kind != "batch_file_not_live" or writer is None or uri not in writer.rewritten:
            return False
        REPORT.count("events", "verify_batch_file_not_live_after_delta_spark_dml")
        return True

    def _tables(self) -> list[str]:
        return [t for t in (self.table, self.jdbc_table, self.jdbci_table, self.drift_table) if exists(t)]

    def spark_op(self, r: random.Random, uri: str | None = None) -> None:
        """One Delta Spark statement on ``uri`` (or a table of the trial): maintenance on any,
        foreign rows only in the main table, new columns only in the drift table."""
        assert self.spark_writer is not None
        if uri is None:
            uri = self.table if r.random() < 0.6 else r.choice(self._tables())
        if not exists(uri):
            return
        ops = list(MAINTENANCE)
        ops += FOREIGN_DML if uri == self.table else []
        ops += ["add_columns"] if uri == self.drift_table else []
        err = self.spark_writer.run(r.choice(ops), uri, r, drift=uri == self.drift_table)
        if err is not None:
            self.problems.append(err)

    @precondition(lambda self: getattr(self, "spark_writer", None) is not None and exists(self.table))
    @rule(dice=DICE)
    def delta_spark_writes(self, dice: int) -> None:
        """Delta Spark as the other writer between loads (tests/chaos/spark_writer.py)."""
        r = self.dice(dice)
        for _ in range(r.randrange(1, 3)):
            self.spark_op(r)

    @precondition(lambda self: getattr(self, "spark_writer", None) is not None and exists(self.table))
    @rule(dice=DICE)
    def delta_spark_during_a_load(self, dice: int) -> None:
        """A Delta Spark statement while a run of some pipeline plans, writes and commits."""
        r = self.dice(dice)
        pipe = self.pipes[r.choice(self.all_pipes)]
        run = self._run_for(r, pipe)
        self.new_input_for(run, r)
        fault = self.draw_fault(r)
        REPORT.count("events", "delta_spark_during_a_load")
        with ThreadPoolExecutor(max_workers=1) as pool:
            load = pool.submit(self.dag_run, run, fault)
            time.sleep(r.uniform(0.0, 1.5))
            self.spark_op(r, self.target(pipe) if r.random() < 0.5 else None)
            load.result()

    @rule(dice=DICE)
    def two_runs_at_once(self, dice: int) -> None:
        """Two DAG runs of one offset pipeline planning and loading at the same moment."""
        r = self.dice(dice)
        pipe = self.pipes[r.choice([p for p in self.all_pipes if self.pipes[p].boundary == "offsets"])]
        if pipe.name == "off":
            for _ in range(r.randrange(1, 4)):
                self.world.land(pipe.root, r.randrange(1, 5))
        runs = [self.new_run(pipe), self.new_run(pipe)]
        REPORT.count("events", "two_runs_at_once")
        faults = [self.draw_fault(r) for _ in runs]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(2)))

    @precondition(lambda self: self.short and self.waits < 2)
    @rule()
    def wait_past_retention(self) -> None:
        """Let markers and log entries expire (the trial's table keeps them 3 seconds)."""
        self.waits += 1
        time.sleep(3.2)
        REPORT.count("faults", "markers_expire")

    # -- the end of a trial ----------------------------------------------------------
    def drain(self) -> list[str]:
        """Faults stop: clear every failed run, re-freeze what the runbook says to re-freeze,
        and load until no pipeline has anything left. What still cannot move is wedged."""
        wedged: list[str] = []
        for pipe in ("int", "m0", "m1"):
            p = self.pipes[pipe]
            for day in range(DAYS):
                start = BASE + timedelta(days=day)
                directory = self.day_dir(p, start)
                covered = any(
                    r.pipe is p and r.interval and r.interval[0] == start and not r.zero_length
                    for r in self.runs
                )
                if os.path.isdir(directory) and not covered:
                    self.new_run(p, self.interval_for(day, "daily"))
        for run in list(self.runs):
            if run.done:
                continue
            if not self._settle(run):
                wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:] or 'no error'}")
        offsets = [("off", len(self.world.paths) + 3), ("drift", len(self.world.paths) + 3)]
        if self.pg is not None:
            offsets.append(("jdbc", self.jdbc_key + 3))
        for name, bound in offsets:
            for _ in range(bound):
                run = self.new_run(self.pipes[name])
                if not self._settle(run):
                    wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:]}")
                    break
                if not self._last_loaded_something:
                    break
        return wedged

    _last_loaded_something = False

    def _settle(self, run: Run) -> bool:
        before = sum(REPORT.outcomes.values()) - REPORT.outcomes["no_new_data"]
        for _ in range(4):
            err = self.attempt(run)
            if err is None:
                after = sum(REPORT.outcomes.values()) - REPORT.outcomes["no_new_data"]
                self._last_loaded_something = after > before
                return True
            if _documented_refusal(err):
                run.done = True
                self._last_loaded_something = False
                return True
            if _refrozen_by_runbook(err) and isinstance(err, BatchError):
                # docs/runbook.md: re-freeze the batch from the input as it is now.
                REPORT.count("events", "refreeze_by_runbook")
                fix = self.new_run(run.pipe, run.interval, restate=True, key=_key_of(err))
                for _ in range(3):
                    if self.attempt(fix) is None:
                        break
        return False

    def teardown(self) -> None:
        try:
            os.environ.pop(ENV_VAR, None)
            if not hasattr(self, "world"):
                return
            REPORT.trials += 1
            wedged = self.drain()
            if on_s3() and exists(self.table):
                REPORT.count("events", "main_table_on_s3")  # the S3 tier checks it ran there
            verdict = check_tables(self.world, self.table, self.quarantine, foreign=self.foreign)
            check_tables(self.world, self.drift_table, None, "drift", verdict)
            if self.pg is not None:
                for pipe, due in (("jdbc", None), ("jdbci", self.jdbci_due)):
                    hist = self.hist(self.pipes[pipe])
                    check_jdbc_batches(
                        hist.at,
                        hist.now(),
                        self.target(self.pipes[pipe]),
                        self.pipes[pipe].pipeline_id,
                        hist.key,
                        verdict,
                        due_keys=due,
                        offsets=pipe == "jdbc",
                    )
            REPORT.duplicates += len(verdict.duplicates)
            REPORT.losses += len(verdict.losses)
            REPORT.wrong_rows += len(verdict.wrong)
            REPORT.wedged += len(wedged)
            # The user's own audit must agree with the oracle: any error it reports on a
            # table the oracle passed is a finding too (a false alarm is a defect of verify).
            findings: list[str] = []
            for uri in (self.table, self.quarantine, self.jdbc_table, self.jdbci_table, self.drift_table):
                if uri is not None and exists(uri):
                    report = audit_table(ref(uri))
                    for f in report.errors:
                        if verdict.clean and self.dml_rewrite(uri, f.kind):
                            continue
                        findings.append(f"{os.path.basename(uri)}: {f.kind}: {f.message}")
            REPORT.audit_errors += len(findings)
            problems = (
                [f"duplicate: {d}" for d in verdict.duplicates]
                + [f"loss: {d}" for d in verdict.losses]
                + [f"wrong: {d}" for d in verdict.wrong]
                + [f"wedged: {w}" for w in wedged]
                + [f"audit: {f}" for f in findings]
                + self.problems
            )
            assert not problems, "chaos trial broke the guarantee:\n" + "\n".join(problems[:40])
        finally:
            if self.pg is not None and hasattr(self, "world"):
                self.pg.execute(f"DROP TABLE IF EXISTS {self.jdbc_name}")
                self.pg.execute(f"DROP TABLE IF EXISTS {self.jdbc_name}_ts")
            shutil.rmtree(self.tmp, ignore_errors=True)
            remove_world(self.tmp)


def _interval_key(run: Run) -> str | None:
    from airflow_eod.core.batch import BatchKey

    if run.interval is None:
        return None
    return BatchKey.for_interval(run.pipe.pipeline_id, *run.interval).key
