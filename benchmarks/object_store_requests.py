"""Requests and time per commit and per ask on an object store, against the batches a table holds.

``python -m benchmarks.object_store_requests [--store s3|azure|gcs] [--batches 120] [--every 10]``

Starts the store's test server on 127.0.0.1 (SeaweedFS, Azurite or fake-gcs-server: the
``objectstore`` tier's, tests/support), grows one table batch by batch through the product's
own commit (one Parquet object per batch, staged through the storage seam as Spark's s3a
writer leaves them; no JVM), and prints, every ``--every`` batches, the requests and the wall
time of that batch's commit (cold: the process's log cache cleared first), of a cold ask of
the oldest batch and of a warm one. The request counts are the storage's own
(:attr:`~airflow_eod.core.storage.object_store.ObjectStorage.requests`: the calls airflow-eod
makes; obstore's internal retries and delta-rs's own requests are not in them).

The object-store area of ``make bench`` (:mod:`benchmarks.object_store`) measures the same on
S3 at 100, 1,000 and 10,000 batches, with the load against a plain Spark write; this script is
for a short history on any of the three stores. Every figure is information, never a test.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any


def _server(store: str) -> Any:
    if store == "s3":
        from tests.support.s3_server import S3Server

        return S3Server.start()
    if store == "azure":
        from tests.support.azurite_server import AzuriteServer

        return AzuriteServer.start()
    from tests.support.gcs_server import GCSServer

    return GCSServer.start()


def _root(store: str, server: Any) -> str:
    if store == "azure":
        return f"az://{server.container}"
    return f"{'s3' if store == 's3' else 'gs'}://{server.bucket}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.object_store_requests")
    parser.add_argument("--store", choices=("s3", "azure", "gcs"), default="s3")
    parser.add_argument("--batches", type=int, default=120)
    parser.add_argument("--every", type=int, default=10)
    args = parser.parse_args(argv)

    from airflow_eod.core.ask import ask
    from airflow_eod.core.delta.log import clear_cache
    from airflow_eod.core.load_commit import commit_batch
    from airflow_eod.core.table_ref import TableRef
    from tests.core.test_object_store_tables import _batch_at, stage

    server = _server(args.store)
    try:
        ref = TableRef.parse(f"{_root(args.store, server)}/bench/{uuid.uuid4().hex}/orders", server.options())
        store = ref.storage()

        def made() -> int:
            return sum(store.requests.values())  # type: ignore[attr-defined]

        print(
            "batches | commit requests | commit ms | cold ask requests | cold ask ms | "
            "warm ask requests | warm ask ms"
        )
        for n in range(1, args.batches + 1):
            batch = _batch_at(n)
            staged = stage(ref, batch, [n])
            clear_cache()
            c0, t0 = made(), time.perf_counter()
            commit_batch(ref, batch, 0, *staged)
            c1, t1 = made(), time.perf_counter()
            clear_cache()
            ask(ref, _batch_at(1))
            c2, t2 = made(), time.perf_counter()
            ask(ref, _batch_at(1))
            c3, t3 = made(), time.perf_counter()
            if n == 1 or n % args.every == 0:
                print(
                    f"{n} | {c1 - c0} | {(t1 - t0) * 1e3:.0f} | {c2 - c1} | {(t2 - t1) * 1e3:.0f} | "
                    f"{c3 - c2} | {(t3 - t2) * 1e3:.0f}",
                    flush=True,
                )
        print("requests by operation:", dict(store.requests))  # type: ignore[attr-defined]
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
