"""Long chaos runs: many generated histories against real Spark, real Delta tables and a real
PostgreSQL, each checked row by row (docs/testing.md).

    python -m benchmarks.chaos --trials 500 --seed 1 [--per-chunk 10] [--steps 14]
                               [--kill-percent 20] [--max-kills 6] [--shrink] [--no-postgres]
                               [--delta-spark-writer] [--engine delta-rs|delta-spark|mixed]

Trials run in chunks; chunk ``i`` is generated from seed ``--seed + i``, so a failing chunk is
replayed exactly with ``--seed S --trials N`` (``--shrink`` lets Hypothesis cut the failing
history down first). Prints the counters (trials, faults by kind, outcomes, refusals, load
attempts and the SIGKILLs landed by point, with the kill share in % of load attempts) and the
duplicates, losses, wrong rows, wedged pipelines and audit errors found, with the seed of
every failing chunk; exits 1 if any. Not a benchmark of speed: it is here because it runs
for long, like the benchmarks.

``--delta-spark-writer`` adds Delta Spark as the other writer (appends, OPTIMIZE and ZORDER,
VACUUM, DELETE/UPDATE/MERGE, checkpoints, ADD COLUMNS, properties: tests/chaos/spark_writer.py);
``--engine`` picks the loads' engine (``mixed``: a coin per pipeline and trial). Both need the
Delta Spark jars: EOD_DELTA_SPARK_JARS, a comma-separated list of their paths.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

# The harness lives with the tests (it is test tooling, not part of the package).
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from tests.chaos.machine import ENGINES
from tests.chaos.report import REPORT
from tests.chaos.run import run_trials
from tests.chaos.spark_writer import DELTA_SPARK_JARS_ENV, delta_spark_conf, session_conf

POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"
TINY_DATA = {"spark.sql.shuffle.partitions": "1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.chaos", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1, help="seed of the first chunk")
    parser.add_argument("--per-chunk", type=int, default=10, help="trials generated from one seed")
    parser.add_argument("--steps", type=int, default=14, help="at most this many steps per history")
    parser.add_argument("--kill-percent", type=int, default=20, help="share of trials with SIGKILLs")
    parser.add_argument("--max-kills", type=int, default=6, help="SIGKILLs at most in one trial")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing history (slow)")
    parser.add_argument("--no-postgres", action="store_true", help="leave the JDBC pipeline out")
    parser.add_argument(
        "--delta-spark-writer", action="store_true", help="Delta Spark's statements between and during loads"
    )
    parser.add_argument("--engine", choices=ENGINES, default="delta-rs", help="the loads' engine")
    parser.add_argument("--timings", action="store_true", help="where the time went (tests/chaos/timing.py)")
    args = parser.parse_args(argv)
    if (args.delta_spark_writer or args.engine != "delta-rs") and not delta_spark_conf():
        parser.error(f"--delta-spark-writer and --engine need {DELTA_SPARK_JARS_ENV} (the Delta Spark jars)")
    os.environ["EOD_CHAOS_KILL_PERCENT"] = str(args.kill_percent)
    os.environ["EOD_CHAOS_MAX_KILLS"] = str(args.max_kills)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["EOD_FAULTPOINTS_TESTING"] = "1"  # the harness's faults are test-only points
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from airflow_eod.spark.session import get_session
    from tests.chaos.machine import SPARK

    conf = {**session_conf(POSTGRES_JDBC_JAR), "spark.ui.showConsoleProgress": "false"}
    # A batch here is a few rows: one shuffle partition (a load's two small aggregations)
    # instead of four; nothing the harness checks depends on it.
    spark = get_session(conf={**conf, **TINY_DATA})
    SPARK["delta_spark"] = args.delta_spark_writer
    SPARK["engine"] = args.engine
    server = None
    if not args.no_postgres and os.path.exists(POSTGRES_JDBC_JAR):
        from tests.support.postgres_server import PostgresServer

        server = PostgresServer.start()
    SPARK["postgres"] = server
    from tests.chaos.children import CHILDREN

    built = time.time()
    archive = CHILDREN.build_archive()  # once per machine: the children's JVMs start cheaper
    print(f"chaos: children's class archive: {archive or 'none'} ({time.time() - built:.0f} s)", flush=True)
    sampler = None
    if args.timings:  # from here on: the trials alone
        from tests.chaos import timing

        timing.install()
        timing.TIMINGS.started = time.monotonic()
        sampler = timing.CpuSampler().start()
    started = time.time()
    try:
        run_trials(
            spark,
            trials=args.trials,
            base_seed=args.seed,
            per_chunk=args.per_chunk,
            steps=args.steps,
            shrink=args.shrink,
            say=lambda line: print(line, flush=True),
        )
    finally:
        if server is not None:
            server.stop()
    print(f"chaos: command: python -m benchmarks.chaos {' '.join(argv or sys.argv[1:])}")
    print(f"chaos: JDBC pipeline: {'on' if server is not None else 'off (no PostgreSQL)'}")
    writer = "on" if args.delta_spark_writer else "off"
    print(f"chaos: Delta Spark as the other writer: {writer}; engine {args.engine}")
    print(f"chaos: elapsed {time.time() - started:.0f} s")
    print("\n".join(REPORT.lines()))
    if sampler is not None:
        from tests.chaos.timing import TIMINGS

        print("\n".join(TIMINGS.lines(REPORT.trials)))
        print(sampler.line(REPORT.trials))
    return 1 if REPORT.failures or REPORT.failing_seeds else 0


if __name__ == "__main__":
    sys.exit(main())
