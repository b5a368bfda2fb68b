"""Long histories built through the real engine, for the ask, commit, planning and state
figures.

A history is one table and one offset pipeline, grown one batch at a time exactly as a
task grows it: the source plans the next batch (plan log, claim, the ask of the newest
batch), a tiny Parquet file is staged with pyarrow (Spark's part of a load is measured in
``load.py``), and :func:`airflow_eod.core.load_commit.commit_batch` commits it with its marker
and writes its commit record. Nothing in the Delta log or the plan log is written by hand.

- :class:`LandingHistory`: a ``LandingFilesSource`` in offsets mode, one new CSV file per
  batch in a landing directory that keeps all its old files.
- :class:`JdbcHistory`: a ``JdbcIncrementalSource`` in offsets mode against a real
  PostgreSQL table. Building it through ``source.plan`` would run a source query per
  batch; the builder plans through the same planner (:func:`plan_offset_batch`) with the
  boundary the source computes (``low`` = the previous ``high``, one new row per batch), and
  only the timed batches plan through ``source.plan`` against the server.

Histories live in a work directory and can be resumed (``--resume``) after an interruption.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema

from airflow_eod.core.ask import ask
from airflow_eod.core.delta import log as delta_log
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_offset_batch
from airflow_eod.core.source import Credentials, ReadContext
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.landing_files import LandingFilesSource
from benchmarks import pg as pgmod
from benchmarks.common import fmt_int, progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def forget_readings() -> None:
    """Start as a new task process does: no reading of the table cached in this process
    (the core keeps the newest reading of each table and reads only newer commits)."""
    clear = getattr(delta_log, "clear_cache", None)
    if clear is not None:
        clear()


# Seconds the JDBC source spent in its own SQL (one JDBC connection and statement), per plan call.
_QUERY_SECONDS: list[float] = []


@dataclass(frozen=True)
class _TimedJdbcSource(JdbcIncrementalSource):
    """The JDBC source, with the time of its SQL (a JDBC connection and one statement)
    recorded, so the planning figure can be split into the source's query and the rest."""

    def _query(self, ctx: ReadContext, sql: Callable[[bool], str], label: str | None) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return super()._query(ctx, sql, label)
        finally:
            _QUERY_SECONDS.append(time.perf_counter() - t0)


@dataclass
class Measured:
    """What was measured at one checkpoint (``n`` committed batches); seconds."""

    n: int
    ask_oldest: list[float] = field(default_factory=list)  # each in a fresh process's state
    ask_newest: list[float] = field(default_factory=list)
    warm_oldest: list[float] = field(default_factory=list)  # repeated in one process
    warm_newest: list[float] = field(default_factory=list)
    spark_oldest: list[float] = field(default_factory=list)
    spark_newest: list[float] = field(default_factory=list)
    plan: list[float] = field(default_factory=list)
    query: list[float] = field(default_factory=list)
    commit: list[float] = field(default_factory=list)
    checkpoint_commit: list[float] = field(default_factory=list)
    state: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


@dataclass
class Progress:
    built: int = 0
    build_seconds: float = 0.0
    resumed_at: int | None = None
    measured: dict[str, Measured] = field(default_factory=dict)


def _checkpoint_version(table: str) -> int:
    try:
        with open(os.path.join(table, "_delta_log", "_last_checkpoint")) as fh:
            return int(json.load(fh)["version"])
    except FileNotFoundError:
        return -1


class History:
    """One table and one offset pipeline, grown through the real engine."""

    kind = "history"

    def __init__(self, name: str, root: str, pipeline: str, config: dict[str, str], resume: bool) -> None:
        self.name = name
        self.root = root
        self.table = os.path.join(root, "table")
        self.pipeline = pipeline
        self.config = config
        self._progress_file = os.path.join(root, "progress.json")
        self.progress = Progress()
        if resume and os.path.exists(self._progress_file):
            with open(self._progress_file) as fh:
                body = json.load(fh)
            measured = {k: Measured(**v) for k, v in body.pop("measured").items()}
            self.progress = Progress(**body, measured=measured)
            self.progress.built = self.count()
            self.progress.resumed_at = self.progress.built
        else:
            self.reset()

    def reset(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        os.makedirs(self.root)
        self.progress = Progress()

    # -- what a kind of history provides --------------------------------------------
    def plan_next(self, n: int, *, timed: bool) -> tuple[Plan, float]:
        """Plan batch ``n``; the seconds of the source's ``plan(...)`` when ``timed``."""
        raise NotImplementedError

    # -- growth ---------------------------------------------------------------------
    def plan_log(self) -> PlanLog:
        return PlanLog(TableRef.parse(self.table), self.pipeline)

    def is_committed(self, key: Any) -> bool:
        return ask(TableRef.parse(self.table), key).committed

    def count(self) -> int:
        """Committed batches (the newest plan may be planned and not committed)."""
        seq = self.plan_log().newest_offset_seq()
        if seq is None:
            return 0
        newest = self.plan_log().get_offset_plan(seq)
        return seq + 1 if self.is_committed(newest.key) else seq

    def _stage(self, plan: Plan) -> tuple[StagedBatch, Manifest]:
        """A one-row Parquet file in the attempt's directory, described as Spark's staging
        would describe it (footer statistics through ``file_stats``)."""
        attempt = uuid.uuid4().hex[:16]
        rel_dir = attempt_dir(plan.key, plan.generation, attempt)
        os.makedirs(os.path.join(self.table, rel_dir), exist_ok=True)
        rel = f"{rel_dir}/part-00000.parquet"
        full = os.path.join(self.table, rel)
        data = pa.table({"seq": pa.array([plan.seq or 0], pa.int64())})
        pq.write_table(data, full)
        rows, stats = file_stats(full)
        st = os.stat(full)
        staged = StagedBatch(
            Schema.from_arrow(data.schema).to_json(),
            [],
            rel_dir,
            [StagedFile(rel, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)],
        )
        manifest = Manifest(
            self.pipeline,
            plan.batch_key,
            plan.generation,
            plan.boundary,
            plan.input_fingerprint,
            rows,
            1,
            attempt,
            "delta-rs",
            run_id=f"bench-{plan.seq}",
            try_number=1,
        )
        return staged, manifest

    def step(self, *, timed: bool) -> tuple[float, float, bool]:
        """Add one committed batch: ``(plan seconds, commit seconds, wrote a checkpoint)``.

        Each batch starts as its own task process would: nothing cached from the batches
        before it; the commit then benefits from what this batch's planning read, as in a task.
        """
        n = self.progress.built
        forget_readings()
        plan, plan_s = self.plan_next(n, timed=timed)
        if plan.seq != n:
            raise RuntimeError(f"{self.name}: planned batch {plan.seq}, expected {n}")
        staged, manifest = self._stage(plan)
        before = _checkpoint_version(self.table)
        t0 = time.perf_counter()
        _ours, status = commit_batch(
            TableRef.parse(self.table),
            plan.key,
            plan.generation,
            staged,
            manifest,
            table_configuration=self.config,
        )
        commit_s = time.perf_counter() - t0
        if not status.committed:
            raise RuntimeError(f"{self.name}: batch {n} did not commit")
        self.progress.built += 1
        return plan_s, commit_s, _checkpoint_version(self.table) != before

    def grow(self, upto: int) -> None:
        """Grow (untimed) until ``upto`` batches are committed, printing progress."""
        start, t0 = self.progress.built, time.perf_counter()
        last = t0
        while self.progress.built < upto:
            self.step(timed=False)
            now = time.perf_counter()
            if now - last >= 15 or self.progress.built == upto:
                done = self.progress.built - start
                rate = (now - t0) / max(done, 1)
                self.progress.build_seconds += now - last
                last = now
                progress(
                    f"{self.name}: {fmt_int(self.progress.built)}/{fmt_int(upto)} batches, "
                    f"{rate * 1000:.0f} ms per batch, about {rate * (upto - self.progress.built):.0f} s to go"
                )
                self.save()
        self.progress.build_seconds += time.perf_counter() - last

    def window(self, m: Measured, batches: int) -> None:
        """Grow by ``batches``, timing each plan and commit: the figures for ``m.n``."""
        t0 = time.perf_counter()
        for _ in range(batches):
            del _QUERY_SECONDS[:]
            plan_s, commit_s, checkpointed = self.step(timed=True)
            m.plan.append(plan_s)
            m.query.append(sum(_QUERY_SECONDS))
            m.commit.append(commit_s)
            if checkpointed:
                m.checkpoint_commit.append(commit_s)
        self.progress.build_seconds += time.perf_counter() - t0

    def save(self) -> None:
        body = asdict(self.progress)
        with open(self._progress_file + ".tmp", "w") as fh:
            json.dump(body, fh)
        os.replace(self._progress_file + ".tmp", self._progress_file)

    def key_of(self, seq: int) -> Any:
        return self.plan_log().get_offset_plan(seq).key


class LandingHistory(History):
    """Offsets over a landing directory that keeps every file it ever received."""

    kind = "landing"

    def __init__(self, name: str, root: str, config: dict[str, str], resume: bool) -> None:
        super().__init__(name, root, "bench.landing", config, resume)
        self.landing = os.path.join(root, "landing")
        os.makedirs(self.landing, exist_ok=True)
        self.source = LandingFilesSource(path=self.landing, file_format="csv", schema="seq BIGINT")
        self.ctx = ReadContext()

    def plan_next(self, n: int, *, timed: bool) -> tuple[Plan, float]:
        path = os.path.join(self.landing, f"batch-{n:07d}.csv")
        if not os.path.exists(path):
            with open(path, "w") as fh:
                fh.write(f"seq\n{n}\n")
        t0 = time.perf_counter()
        # As BaseDeltaLoadOperator.execute calls it: a fresh plan log and the ask as is_committed.
        plan = self.source.plan(
            PlanLog(TableRef.parse(self.table), self.pipeline),
            self.ctx,
            run_token=f"run-{n}",
            is_committed=lambda key: ask(TableRef.parse(self.table), key).committed,
        )
        elapsed = time.perf_counter() - t0
        if plan is None:
            raise RuntimeError(f"{self.name}: the source found nothing new for batch {n}")
        return plan, elapsed


class JdbcHistory(History):
    """Offsets over a PostgreSQL table with a monotonic integer key."""

    kind = "jdbc"

    def __init__(self, name: str, root: str, pg: Any, spark: SparkSession, resume: bool) -> None:
        self.pg = pg
        self.source = _TimedJdbcSource(url=pg.jdbc_url, table=pgmod.SOURCE_TABLE, key_column="id")
        self.ctx = ReadContext(spark_factory=lambda: spark, credentials=Credentials(pg.user, pg.password))
        super().__init__(name, root, "bench.jdbc", {}, resume)
        if self.progress.built and self.plan_log().get_offset_plan(0).source != self.source.identity():
            progress(f"{name}: the resumed history was planned against another server; rebuilding")
            self.reset()
        if self.progress.built:
            pgmod.ensure_rows(pg, self.progress.built)

    def _next_offsets(self, history: OffsetHistory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        # What JdbcIncrementalSource computes when one new row arrived after the last batch.
        newest = history.newest()
        low = newest.boundary["high"] if newest is not None else None
        high = (low or 0) + 1
        boundary = {
            "table": self.source.table,
            "key_column": self.source.key_column,
            "low": low,
            "high": high,
        }
        return boundary, [{"rows": 1}]

    def plan_next(self, n: int, *, timed: bool) -> tuple[Plan, float]:
        if not timed:
            plan = plan_offset_batch(
                PlanLog(TableRef.parse(self.table), self.pipeline),
                run_token=f"run-{n}",
                is_committed=lambda key: ask(TableRef.parse(self.table), key).committed,
                next_offsets=self._next_offsets,
                source=self.source.identity(),
            )
            assert plan is not None
            return plan, 0.0
        pgmod.ensure_rows(self.pg, n + 1)  # one new row in the source: the next batch
        t0 = time.perf_counter()
        found = self.source.plan(
            PlanLog(TableRef.parse(self.table), self.pipeline),
            self.ctx,
            run_token=f"run-{n}",
            is_committed=lambda key: ask(TableRef.parse(self.table), key).committed,
        )
        elapsed = time.perf_counter() - t0
        if found is None:
            raise RuntimeError(f"{self.name}: the source found no new row for batch {n}")
        return found, elapsed

    def grow(self, upto: int) -> None:
        super().grow(upto)
        pgmod.ensure_rows(self.pg, self.progress.built)


def measure_state(table: str) -> dict[str, float]:
    """Bytes and files of ``_delta_log`` and the plan log, and the newest checkpoint."""
    out: dict[str, float] = {}
    log_dir = os.path.join(table, "_delta_log")
    entries = [e for e in os.scandir(log_dir) if e.is_file()]
    out["log_bytes"] = sum(e.stat().st_size for e in entries)
    out["log_files"] = len(entries)
    out["log_commits"] = sum(1 for e in entries if e.name.endswith(".json") and e.name[:20].isdigit())
    version = _checkpoint_version(table)
    if version >= 0:
        files = [e for e in entries if e.name.startswith(f"{version:020d}.checkpoint")]
        out["checkpoint_bytes"] = sum(e.stat().st_size for e in files)
        markers = 0
        for e in files:
            txn = pq.read_table(e.path, columns=["txn"]).column("txn").drop_null()
            markers += len(txn)
        out["checkpoint_markers"] = markers
    for key, top in (
        ("plan_log", os.path.join(table, "_eod", "pipelines")),
        ("index", os.path.join(table, "_eod", "checkpoints")),
    ):
        size = count = 0
        for dirpath, _dirs, names in os.walk(top):
            for name in names:
                size += os.path.getsize(os.path.join(dirpath, name))
                count += 1
        out[f"{key}_bytes"], out[f"{key}_files"] = size, count
    return out


def guarded(m: Measured, what: str, fn: Callable[[], None]) -> None:
    """Run one measurement; a failure is recorded (and printed as ERROR), not raised."""
    try:
        fn()
    except Exception as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        m.errors.append(f"{what}: {type(exc).__name__}: {text}"[:300])
        progress(f"{what} failed: {type(exc).__name__}: {text}")
