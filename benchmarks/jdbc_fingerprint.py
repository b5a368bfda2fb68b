"""What the JDBC content fingerprint costs (issue 18, item 2): planning a 1M-row range with
and without it, side by side, on a real PostgreSQL.

    python -m benchmarks.jdbc_fingerprint            # 1,000,000 rows, 5 rounds
    python -m benchmarks.jdbc_fingerprint --rows 200000 --rounds 3

Each round, interleaved so that both see the same cache state:

- *plan, count only*: the source's ``plan(...)`` of an interval batch holding every row
  (``created_at`` in ``[2026-11-01, 2026-11-13)``) into a fresh plan log, with the range
  measured by its row count (what a plan held before the fingerprint, and what other
  databases still get);
- *plan, with fingerprint*: the same with the count and the content fingerprint;
- *check, count only* / *check, fingerprint*: one check of the frozen range (``verify``
  runs it twice per batch: before the read and before the commit);
- *null-key count*: the NULL-key count every planning runs (item 3; part of both plans).

Planning over libpq (no JVM). A benchmark, not a test: it prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from benchmarks import pg as pgmod


class _CountOnly(JdbcIncrementalSource):
    """The source as it measured a range before fingerprints: by its row count."""

    def _measure(self, ctx: ReadContext, boundary: dict[str, Any], label: str | None) -> dict[str, Any]:
        return {"rows": self._count(ctx, boundary, label)}


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    pg = pgmod.start()
    try:
        pgmod.create_source_table(pg)
        started = time.perf_counter()
        pgmod.ensure_rows(pg, args.rows)
        pg.execute(f"ANALYZE {pgmod.SOURCE_TABLE}")
        took = time.perf_counter() - started
        print(f"source: {args.rows:,} rows in {pgmod.SOURCE_TABLE} ({took:.1f} s to load)")
        ctx = ReadContext(credentials=Credentials(pg.user, pg.password))
        kw: dict[str, Any] = {
            "url": pg.jdbc_url,
            "table": pgmod.SOURCE_TABLE,
            "key_column": "created_at",
            "key_type": "timestamp",
            "boundary": "interval",
        }
        with_fp, count_only = JdbcIncrementalSource(**kw), _CountOnly(**kw)
        interval = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 13, tzinfo=UTC))
        boundary = {"start": interval[0].isoformat(), "end": interval[1].isoformat()}

        def plan(source: JdbcIncrementalSource) -> Callable[[], Any]:
            def run() -> Any:
                with tempfile.TemporaryDirectory() as table:
                    plan_log = PlanLog(TableRef.parse(table), "bench.fp")
                    got = source.plan(
                        plan_log, ctx, run_token="r", is_committed=lambda _k: False, interval=interval
                    )
                    assert got is not None and got.inputs[0]["rows"] == args.rows
                    return got

            return run

        cases: dict[str, Callable[[], Any]] = {
            "plan, count only": plan(count_only),
            "plan, with fingerprint": plan(with_fp),
            "check, count only": lambda: count_only._measure(ctx, boundary, None),
            "check, fingerprint": lambda: with_fp._measure(ctx, boundary, None),
            "null-key count": lambda: with_fp._null_key_rows(ctx, None),
        }
        for fn in cases.values():  # warm-up: the table in PostgreSQL's cache
            fn()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, fn in cases.items():
                times[name].append(_timed(fn))
        med = {name: statistics.median(ts) for name, ts in times.items()}
        head = f"{'figure':<26}{'median':>10}{'min':>10}{'max':>10}"
        print(f"{head}   ({args.rounds} rounds, {args.rows:,} rows)")
        for name, ts in times.items():
            print(f"{name:<26}{med[name] * 1000:>8.0f}ms{min(ts) * 1000:>8.0f}ms{max(ts) * 1000:>8.0f}ms")
        plan_ratio = med["plan, with fingerprint"] / med["plan, count only"]
        check_ratio = med["check, fingerprint"] / med["check, count only"]
        per_batch = 3 * (med["check, fingerprint"] - med["check, count only"])
        print(f"planning with / without fingerprint: {plan_ratio:.2f}x")
        print(f"one check with / without fingerprint: {check_ratio:.2f}x")
        print(
            f"added per batch (planning + the check before the read + the check before the commit): "
            f"{per_batch * 1000:.0f} ms, {per_batch / args.rows * 1e9:.0f} ns per row"
        )
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
