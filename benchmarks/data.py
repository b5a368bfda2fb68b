"""Landing files for the load and peer figures: deterministic order CSV files written with
pyarrow (fast enough for 10M rows), with the columns of
:mod:`airflow_eod.examples.sample_data`."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"
_BASE_US = 1_793_491_200_000_000  # 2026-11-01T00:00:00Z in microseconds
_CUSTOMERS = pa.array([f"customer-{i:02d}" for i in range(50)])


def orders_table(first_id: int, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    at_us = _BASE_US + rng.integers(0, 20 * 86_400 * 1_000_000, rows, dtype=np.int64)
    ordered_at = pa.array(at_us, pa.timestamp("us", tz="UTC"))
    return pa.table(
        {
            "order_id": pa.array(np.arange(first_id, first_id + rows, dtype=np.int32)),
            "customer": _CUSTOMERS.take(pa.array(rng.integers(0, 50, rows))),
            "amount": pa.array(rng.integers(1, 100_000, rows) / 100.0),
            "order_date": pc.cast(pc.floor_temporal(ordered_at, unit="day"), pa.date32()),
            "ordered_at": pc.strftime(ordered_at, format="%Y-%m-%dT%H:%M:%SZ"),
        }
    )


def write_orders_csv(
    directory: str, rows: int, files: int, *, first_id: int = 1, prefix: str = "orders"
) -> int:
    """Write ``rows`` rows in ``files`` CSV files (with a header) into ``directory``.

    A file appears under its final name only once complete (written under a dot name and
    renamed), so a streaming query that lists the directory never sees half a file.
    """
    os.makedirs(directory, exist_ok=True)
    per_file = -(-rows // files)
    written = 0
    for _ in range(files):
        n = min(per_file, rows - written)
        if n <= 0:
            break
        name = f"{prefix}-{first_id + written:09d}.csv"
        tmp = os.path.join(directory, f".{name}.tmp")
        pcsv.write_csv(orders_table(first_id + written, n, seed=first_id + written), tmp)
        os.replace(tmp, os.path.join(directory, name))
        written += n
    return written
