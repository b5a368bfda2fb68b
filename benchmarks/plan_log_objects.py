"""Objects in the plan log, with and without compaction, and the requests of an old and a new batch.

``python -m benchmarks.plan_log_objects [--store local|s3] [--batches 100 1000] [--no-compaction]``

Grows one table per size through the product's own commit (each batch planned, its landing
file claimed and committed, as tests/core/test_plan_log_compaction.py does; one Parquet
object per batch, no JVM), with the commit's compaction on (every
:data:`~airflow_eod.core.records.compaction.DEFAULT_EVERY` versions, window
:data:`~airflow_eod.core.records.compaction.DEFAULT_WINDOW`) or off, and prints the
objects under the plan log (entries and segments). On S3 (SeaweedFS, started here on
127.0.0.1) it also prints the requests of an ask, of a plan (put-if-absent of the plan and
its read) and of a commit, for the oldest batch (compacted) and for a new one; the counts are
the storage's own (:attr:`~airflow_eod.core.storage.object_store.ObjectStorage.requests`).
Every figure is information, never a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from typing import Any


def _requests(store: Any) -> int:
    # The local backend counts no requests: its figures print as 0.
    return sum(store.requests.values()) if hasattr(store, "requests") else 0


def measure(ref: Any, batches: int, compaction_on: bool) -> dict[str, Any]:
    from airflow_eod.core.ask import ask
    from airflow_eod.core.delta.log import clear_cache
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.core.records import compaction
    from tests.core.test_plan_log_compaction import PIPELINE, batch_at, grow, load, objects, plan_of

    every = compaction.DEFAULT_EVERY
    compaction.DEFAULT_EVERY = every if compaction_on else 0
    try:
        t0 = time.perf_counter()
        grow(ref, batches)
        grown = time.perf_counter() - t0
        entries, segments = objects(ref)
        store = ref.storage()
        out: dict[str, Any] = {"entries": entries, "segments": segments, "grow_s": round(grown, 1)}
        for label, n in (("old", 0), ("new", batches - 1)):
            clear_cache()
            r0 = _requests(store)
            assert ask(ref, batch_at(n)).committed
            r1 = _requests(store)
            PlanLog(ref, PIPELINE).put_plan(plan_of(batch_at(n)))
            r2 = _requests(store)
            out[f"ask_{label}"], out[f"plan_{label}"] = r1 - r0, r2 - r1
        clear_cache()
        r0 = _requests(store)
        load(ref, batches)  # plan, file claim and commit of the next batch
        out["load_next"] = _requests(store) - r0
        return out
    finally:
        compaction.DEFAULT_EVERY = every


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plan_log_objects")
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--batches", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--no-compaction", action="store_true", help="only the table without compaction")
    parser.add_argument("--only-compaction", action="store_true", help="only the table with compaction")
    args = parser.parse_args(argv)

    from airflow_eod.core.table_ref import TableRef

    server = None
    if args.store == "s3":
        from tests.support.s3_server import S3Server

        server = S3Server.start()
    modes = [
        m for m in (False, True) if not (m and args.no_compaction) and not (not m and args.only_compaction)
    ]
    try:
        print(
            "store | batches | compaction | entries | segments | grow s | ask old | ask new | "
            "plan old | plan new | plan+claim+commit of the next"
        )
        for n in args.batches:
            for on in modes:
                if server is not None:
                    ref = TableRef.parse(
                        f"s3://{server.bucket}/bench/{uuid.uuid4().hex}/orders", server.options()
                    )
                else:
                    ref = TableRef.parse(f"{tempfile.mkdtemp(prefix='eod-planlog-')}/orders")
                m = measure(ref, n, on)
                print(
                    f"{args.store} | {n} | {'on' if on else 'off'} | {m['entries']} | {m['segments']} | "
                    f"{m['grow_s']} | {m['ask_old']} | {m['ask_new']} | {m['plan_old']} | {m['plan_new']} | "
                    f"{m['load_next']}",
                    flush=True,
                )
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
