"""A long history on an object store, built fast: committed by the real engine on a local copy,
then uploaded object by object to the store, where the product reads it as any history.

Growing 10,000 batches one by one against the store (a listing of the landing prefix, the plan
log's objects, the Delta commit, the commit record: dozens of requests each) would take far
longer than the figures it is for. What a batch leaves in the table does not depend on where
the table lies: the Delta log's ``add`` paths, the plan log's keys and the commit records are
relative to the table's root, and the only location a plan holds is its landing files' URIs.
So a :class:`StoreHistory` is built as follows:

1. the landing files (one CSV file of one row per batch) are uploaded in bulk to the landing
   prefix on the store, and the prefix is listed once through the product's own listing
   (:class:`~airflow_eod.sources.landing_store.StoreLanding`), which gives each file's entry
   as planning records it (``{"path": "s3://...", "size", "etag"}``);
2. each batch is planned by the real ``LandingFilesSource`` on that prefix (its identity, its
   ``_next_offsets``, ``plan_offset_batch``: plan log, claim, the ask of the newest batch)
   against a table in a local directory; the one thing replaced is the listing, which returns
   the entry of the batch's file from step 1 instead of listing the prefix again (what a
   listing would return when one new file has arrived). A one-row Parquet file is staged and
   committed by ``commit_batch`` (:class:`~benchmarks.histories.History`), a Delta checkpoint
   every 100 commits as always;
3. every object of the local table is put to the table's prefix on the store.

Nothing in the Delta log or the plan log is written by hand. The check that the store holds a
normal history is the product's: every batch is asked on the store and must answer committed
(:func:`check_every_batch`), and the next batches are planned from the store's listing and
committed there (the measured window of :mod:`benchmarks.object_store`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.source import ReadContext
from airflow_eod.core.staged_files import StagedBatch
from airflow_eod.core.storage import storage_at
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.sources.landing_store import StoreLanding
from benchmarks.histories import History, forget_readings

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

PIPELINE = "bench.store"
SCHEMA = "seq BIGINT"
UPLOAD_THREADS = 16


def landing_name(seq: int) -> str:
    """The landing file of batch ``seq`` (zero-padded: the listing's tie-break is the path)."""
    return f"batch-{seq:07d}.csv"


def landing_body(seq: int) -> bytes:
    return f"seq\n{seq}\n".encode()


def in_parallel(fn: Callable[[Any], None], items: list[Any], threads: int = UPLOAD_THREADS) -> None:
    """``fn`` over ``items`` on ``threads`` threads; the first failure is raised."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in pool.map(fn, items):
            pass


def put_landing_files(root: str, options: dict[str, str], seqs: range) -> None:
    """Upload the landing files of batches ``seqs`` to the landing prefix ``root``."""
    store = storage_at(root, options)
    in_parallel(lambda seq: store.put(landing_name(seq), landing_body(seq)), list(seqs))


def upload_tree(local: str, root: str, options: dict[str, str]) -> int:
    """Put every file under the local directory ``local`` to the store at ``root`` (the same
    relative keys); the number of objects put."""
    keys = []
    for dirpath, _dirs, names in os.walk(local):
        for name in names:
            keys.append(os.path.relpath(os.path.join(dirpath, name), local).replace(os.sep, "/"))
    store = storage_at(root, options)

    def put(key: str) -> None:
        with open(os.path.join(local, key), "rb") as fh:
            store.put(key, fh.read())

    in_parallel(put, keys)
    return len(keys)


@dataclass(frozen=True)
class _Arrived(LandingFilesSource):
    """The landing source on the store's prefix, whose listing returns the files that have
    "arrived" (the entries the store's listing gave once, handed in batch by batch) instead of
    listing the prefix again. Everything else (identity, offsets, plan log) is the source's."""

    arrived: list[dict[str, Any]] = field(default_factory=list, compare=False, repr=False)

    def list_files(
        self,
        label: str | None = None,
        *,
        skip: AbstractSet[str] = frozenset(),
        exclude: Sequence[str] = (),
        required: bool = False,
    ) -> list[dict[str, Any]]:
        # Every file before the newest two was loaded (one file per batch): not re-checked.
        # ``exclude`` (the table's own root) and ``required`` (an empty prefix is a missing
        # source) do not apply: the files handed in are the store's, and there are some.
        return [dict(e) for e in self.arrived[-2:] if e["path"] not in skip]


class StoreHistory(History):
    """One table and one landing pipeline on an object store, built as the module says.

    :param name: for progress lines.
    :param root: a local work directory (the local build of the table: ``root/table``).
    :param landing: the landing prefix on the store (``s3://bucket/prefix``).
    :param table_uri: the table's location on the store.
    :param options: the store's storage options (delta-rs names).
    """

    kind = "store"

    def __init__(self, name: str, root: str, landing: str, table_uri: str, options: dict[str, str]) -> None:
        super().__init__(name, root, PIPELINE, {}, resume=False)
        self.options = options
        self.source = _Arrived(path=landing, file_format="csv", schema=SCHEMA, storage_options=options)
        # The same source, listing the store: what the measured batches plan with.
        self.store_source = LandingFilesSource(
            path=landing, file_format="csv", schema=SCHEMA, storage_options=options
        )
        self.ref = TableRef.parse(table_uri, options)
        self.entries: dict[str, dict[str, Any]] = {}
        self.ctx = ReadContext()
        self.timings: dict[str, float] = {}

    def land(self, upto: int) -> None:
        """Upload the landing files of batches ``0..upto-1`` and list the prefix once."""
        t0 = time.perf_counter()
        put_landing_files(self.source.root, self.options, range(upto))
        listing = StoreLanding(self.source.root, self.options).list_files("*")
        self.entries = {e["path"]: e for e in listing}
        if len(self.entries) != upto:
            found = len(self.entries)
            raise RuntimeError(f"{self.name}: the landing prefix lists {found} files, expected {upto}")
        self.timings["landing upload and listing"] = time.perf_counter() - t0

    def plan_next(self, n: int, *, timed: bool) -> tuple[Plan, float]:
        self.source.arrived.append(self.entries[f"{self.source.root}/{landing_name(n)}"])
        t0 = time.perf_counter()
        plan = self.source.plan(
            PlanLog(TableRef.parse(self.table), self.pipeline),
            self.ctx,
            run_token=f"run-{n}",
            is_committed=lambda key: ask(TableRef.parse(self.table), key).committed,
        )
        if plan is None:
            raise RuntimeError(f"{self.name}: nothing planned for batch {n}")
        return plan, time.perf_counter() - t0

    def build(self, upto: int) -> None:
        """Land, build locally and upload: the store then holds ``upto`` committed batches."""
        self.land(upto)
        t0 = time.perf_counter()
        self.grow(upto)
        self.timings["local build through the engine"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        self.timings["objects uploaded"] = upload_tree(self.table, self.ref.location, self.options)
        self.timings["table upload"] = time.perf_counter() - t0

    def keys(self) -> list[BatchKey]:
        """Every committed batch's key, oldest first (from the local build's plan log)."""
        log = self.plan_log()
        return [log.get_offset_plan(seq).key for seq in range(self.progress.built)]


def check_every_batch(ref: TableRef, keys: list[BatchKey]) -> tuple[int, float]:
    """Ask the store's table for every batch, as a process that starts cold and then keeps its
    reading; ``(batches answered committed, seconds)``."""
    forget_readings()
    t0 = time.perf_counter()
    found = sum(1 for key in keys if ask(ref, key).committed)
    return found, time.perf_counter() - t0


def stage_on_store(ref: TableRef, plan: Plan) -> tuple[StagedBatch, Manifest]:
    """A one-row Parquet object in a new attempt's directory of the store's table, described
    as Spark's staging describes it (footer statistics read from the object)."""
    from tests.support.store_staging import stage_table

    data = pa.table({"seq": pa.array([plan.seq or 0], pa.int64())})
    staged, attempt = stage_table(ref, plan.key, plan.generation, data)
    rows = 1
    manifest = Manifest(
        PIPELINE,
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
