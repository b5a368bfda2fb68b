"""``make bench``: every benchmark area side by side in one run, one table of figures,
targets, ratios and verdicts.

    python -m benchmarks.run [--quick | --smoke] [--only AREA,...] [--resume] [--work DIR]

Areas: history, load, peer, engines, merge, objectstore, kafka (benchmarks/README.md).

Prints the table, writes ``benchmarks/results/<quick|full>.json`` and PNG charts beside it,
and rewrites the run's section of ``benchmarks/README.md``. ``--smoke`` runs every area at
toy sizes, writes its JSON into the work directory only, and draws no charts (CI runs it:
``tests/tooling/test_bench_smoke.py``). Benchmarks, not tests: nothing
here fails on a missed target (the exit code is non-zero only when an area crashed).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from benchmarks import engines, history, kafka, load, merge, object_store, peer
from benchmarks.common import AREAS, Row, Settings, machine, progress, spark_session
from benchmarks.report import readme_section, summary, text_table, update_readme, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.run", description=__doc__.split("\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a reduced set that runs in a few minutes")
    size.add_argument("--smoke", action="store_true", help="every area at toy sizes: does it run at all")
    parser.add_argument("--only", help=f"comma-separated areas: {', '.join(AREAS)}")
    parser.add_argument("--resume", action="store_true", help="continue histories an earlier run left behind")
    parser.add_argument("--work", help="work directory (default: benchmarks/.work/<mode>)")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite benchmarks/README.md")
    args = parser.parse_args(argv)
    settings = Settings.smoke() if args.smoke else Settings.quick() if args.quick else Settings.full()
    if args.only:
        settings.areas = [a.strip() for a in args.only.split(",") if a.strip()]
        unknown = set(settings.areas) - set(AREAS)
        if unknown:
            parser.error(f"unknown areas: {', '.join(sorted(unknown))}")
    work = os.path.abspath(args.work or os.path.join(HERE, ".work", settings.mode))
    os.makedirs(work, exist_ok=True)
    logging.getLogger("py4j").setLevel(logging.ERROR)

    started = time.strftime("%Y-%m-%d %H:%M %Z")
    t0 = time.perf_counter()
    progress(f"{settings.mode} run: areas {', '.join(settings.areas)}; work directory {work}")
    spark = spark_session()
    info = machine(spark)
    runners: dict[str, Callable[[], tuple[list[Row], Any]]] = {
        "history": lambda: history.run(settings, spark, os.path.join(work, "history"), args.resume),
        "load": lambda: load.run(settings, spark, os.path.join(work, "load")),
        "peer": lambda: peer.run(settings, spark, os.path.join(work, "peer")),
        "engines": lambda: engines.run(settings, spark, os.path.join(work, "engines")),
        "merge": lambda: merge.run(settings, spark, os.path.join(work, "merge")),
        "objectstore": lambda: object_store.run(settings, spark, os.path.join(work, "objectstore")),
        "kafka": lambda: kafka.run(settings, spark, os.path.join(work, "kafka")),
    }
    rows: list[Row] = []
    series: dict[str, Any] = {}
    durations: dict[str, float] = {}
    crashed = False
    for area in settings.areas:
        a0 = time.perf_counter()
        progress(f"area {area}")
        try:
            area_rows, series[area] = runners[area]()
            rows += area_rows
        except Exception as exc:
            crashed = True
            traceback.print_exc()
            rows.append(
                Row(
                    area,
                    "the area crashed",
                    None,
                    "",
                    note=f"{type(exc).__name__}: {exc}"[:300],
                    status="ERROR",
                )
            )
        durations[area] = time.perf_counter() - a0
        progress(f"area {area} took {durations[area]:.0f} s")
    spark.stop()
    duration = time.perf_counter() - t0
    info["load_average_at_end"] = list(os.getloadavg())
    for area, seconds in durations.items():
        rows.append(Row("run", f"area {area}, wall time", seconds, "s"))
    results = {
        "mode": settings.mode,
        "started": started,
        "duration_s": duration,
        "areas": settings.areas,
        "area_seconds": durations,
        "machine": info,
        "settings": vars(settings),
        "rows": [r.to_dict() for r in rows],
        "series": series,
    }
    # A smoke run's figures mean nothing: they stay in its work directory.
    results_dir = work if args.smoke else RESULTS
    write_json(results, os.path.join(results_dir, f"{settings.mode}.json"))
    if not args.smoke:
        try:
            from benchmarks.charts import draw_all  # matplotlib: the `bench` extra
        except ImportError as exc:
            # The figures are measured and in the JSON: a missing chart library loses no result.
            progress(f"no charts drawn ({exc}): `make bench` installs the bench extra")
            charts: list[str] = []
        else:
            charts = draw_all(results, RESULTS)
        if not args.no_readme:
            update_readme(os.path.join(HERE, "README.md"), settings.mode, readme_section(results, charts))
    print()
    print(text_table(rows))
    print()
    print(
        f"{settings.mode} run: {summary(rows)}; {duration / 60:.1f} min. "
        f"Results: {results_dir}/{settings.mode}.json"
    )
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
