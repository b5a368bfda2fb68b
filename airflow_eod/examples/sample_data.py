"""Deterministic sample order files for the demo, tests and benchmarks."""

from __future__ import annotations

import datetime as dt
import os
import random

import pyarrow as pa

ORDERS_COLUMNS = ["order_id", "customer", "amount", "order_date", "ordered_at"]
ORDERS_ARROW_SCHEMA = pa.schema(
    [
        ("order_id", pa.int32()),
        ("customer", pa.string()),
        ("amount", pa.decimal128(10, 2)),
        ("order_date", pa.date32()),
        ("ordered_at", pa.timestamp("us", tz="UTC")),
    ]
)


def write_order_files(
    directory: str, files: int, rows_per_file: int, *, first_id: int = 1, seed: int = 7
) -> int:
    """Write ``files`` CSV files of orders into ``directory``; returns the rows written."""
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(seed + first_id)
    order_id = first_id
    base = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for f in range(files):
        path = os.path.join(directory, f"orders-{first_id:06d}-{f:04d}.csv")
        lines = ["order_id,customer,amount,order_date,ordered_at"]
        for _ in range(rows_per_file):
            at = base + dt.timedelta(seconds=rng.randrange(0, 20 * 86400), microseconds=rng.randrange(10**6))
            lines.append(
                f"{order_id},customer-{rng.randrange(50):02d},{rng.randrange(1, 100000) / 100:.2f},"
                f"{at.date().isoformat()},{at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"
            )
            order_id += 1
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return order_id - first_id
