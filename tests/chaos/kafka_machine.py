"""The Kafka pipeline of the chaos harness (``--pipeline kafka``): generated histories of
records produced to a fresh topic and loaded by a :class:`~airflow_eod.sources.KafkaSource`
offset pipeline, under the harness's faults.

A Kafka trial has one topic on the run's broker (``SPARK["kafka"]``, one
:class:`~tests.support.kafka_broker.KafkaBroker` per run) and one table. Its history
(:mod:`tests.chaos.kafka_world`) produces records to several partitions through an
idempotent producer and through transactions that commit or abort, adds partitions
mid-history, and leaves a transaction open while a load plans and reads (the load freezes
at the last stable offset; the transaction commits or aborts after it). A trial may cap its
batches (``max_records_per_batch``: the catch-up takes several) and may partition its table
by ``kafka_partition``. The faults are the append trials' (:class:`~tests.chaos.machine.ChaosMachine`,
whose machinery this reuses): a raise at every fault point, SIGKILLed tries in warm
children (at the named points and at random moments of the read and write), zombies racing
their retry, two runs of the pipeline at once, restatements of committed batches, another
writer's OPTIMIZE, VACUUM, checkpoints and log clean-up, short marker retention, and the
drain that clears every failed run, re-freezes what the runbook says and loads until the
pipeline has nothing left. The checker (:mod:`tests.chaos.kafka_oracle`) then compares the
table, row by row, with every committed record (checked first against what the broker holds).

Not in a Kafka trial: the landing files, the JDBC pipelines, the quarantine, schema drift,
records deleted under a frozen plan and re-created topics (refusals the kafka tier tests),
the delta-spark engine and Delta Spark as the other writer.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from hypothesis.stateful import initialize, precondition, rule

from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.faults import ENV_VAR
from airflow_eod.sources import KafkaSource
from tests.chaos.kafka_oracle import check_kafka_table
from tests.chaos.kafka_world import MAX_PARTITIONS, KafkaWorld
from tests.chaos.machine import DICE, SHORT_RETENTION, SPARK, ChaosMachine, Pipe, Run
from tests.chaos.report import REPORT
from tests.chaos.spark_writer import ForeignRows
from tests.chaos.store import exists, on_s3, ref, remove_world

# The append trial's rules a Kafka trial runs too: they work on any pipeline of the trial.
SHARED_RULES = ("another_writer", "wait_past_retention", "zombie_and_retry", "restate")
# Caps of a batch's offsets (``None``: no cap), one drawn per trial.
CAPS = (None, None, 3, 5, 11)


class KafkaChaosMachine(ChaosMachine):
    """One Kafka trial: a history of produced records, loads and faults against one table."""

    def __init__(self) -> None:
        super().__init__()
        self.pg = None  # no JDBC pipeline in a Kafka trial
        self.quarantine = None  # nor a quarantine: string values are never malformed

    @initialize(seed=DICE)
    def setup(self, seed: int) -> None:
        broker = SPARK.get("kafka")
        if broker is None:
            raise ValueError("a Kafka trial needs the run's broker in SPARK['kafka']")
        if SPARK.get("engine", "delta-rs") != "delta-rs" or SPARK.get("delta_spark") or on_s3():
            raise ValueError(
                "a Kafka trial loads with engine delta-rs into a local table, without Delta Spark"
            )
        self.seed = (seed + self.salt * 2_654_435_761) % 2**63
        self.rng = random.Random(self.seed)
        short, kill_roll = self.rng.random() < 0.5, self.rng.randrange(100)
        self.kill_budget = self.max_kills if kill_roll < self.kill_percent else 0
        self.short = short
        self.config = dict(SHORT_RETENTION) if short else {}
        self.cap = self.rng.choice(CAPS)
        self.partition_by = ["kafka_partition"] if self.rng.random() < 0.5 else []
        self.kworld = KafkaWorld(broker=broker, rng=self.rng, partitions=self.rng.randint(1, 3))
        self.pipes = {"kafka": Pipe("kafka", "chaos.kafka", "offsets", self.kworld.topic)}
        self.all_pipes = ["kafka"]
        self.foreign = ForeignRows()
        self.spark_writer = None
        self.spark_pipes = set()
        REPORT.count("events", "short_retention" if short else "default_retention")
        REPORT.count("events", "kafka_trial")
        REPORT.count("events", f"kafka_cap_{self.cap or 'none'}")

    # -- what the append trial's machinery asks of a pipeline --------------------------
    def source(self, pipe: Pipe, interval: tuple[datetime, datetime] | None) -> Any:
        return KafkaSource(
            bootstrap_servers=self.kworld.broker.bootstrap,
            topics=[self.kworld.topic],
            max_records_per_batch=self.cap,
        )

    def _request(self, run: Run, try_no: int) -> tuple[Any, Any, dict[str, Any]]:
        request, source, settings = super()._request(run, try_no)
        return request, source, {**settings, "partition_by": self.partition_by, "quarantine_table_uri": None}

    def new_input_for(self, run: Run, r: random.Random) -> None:
        self.kworld.produce(3)

    # -- the history ---------------------------------------------------------------------
    @rule(dice=DICE)
    def produce_records(self, dice: int) -> None:
        """Records through the idempotent producer, to partitions picked per record."""
        r = self.dice(dice)
        self.kworld.produce(r.randrange(1, 8))

    @rule(dice=DICE)
    def produce_transaction(self, dice: int) -> None:
        """Records in one transaction, committed, or aborted (their offsets are never read)."""
        r = self.dice(dice)
        abort = r.random() < 0.35
        self.kworld.transaction(r.randrange(1, 6), abort=abort)
        REPORT.count("events", "kafka_transaction_" + ("aborted" if abort else "committed"))

    @precondition(lambda self: self.kworld.partitions < MAX_PARTITIONS)
    @rule(dice=DICE)
    def add_partitions(self, dice: int) -> None:
        """Partitions added to the topic: the next batch reads them from offset 0."""
        r = self.dice(dice)
        self.kworld.add_partitions(r.randint(1, 2))
        self.kworld.produce(r.randrange(0, 6))
        REPORT.count("events", "kafka_partitions_added")

    @rule(dice=DICE)
    def load_kafka(self, dice: int) -> None:
        r = self.dice(dice)
        if r.random() < 0.5:
            self.kworld.produce(r.randrange(1, 6))
        if r.random() < 0.3:
            self.kworld.transaction(r.randrange(1, 4), abort=r.random() < 0.4)
        self.dag_run(self.new_run(self.pipes["kafka"]), self.draw_fault(r))

    @rule(dice=DICE)
    def load_during_open_transaction(self, dice: int) -> None:
        """A run plans and loads while a transaction is open (its records, and any produced
        after them, lie past the last stable offset); the transaction then commits or aborts."""
        r = self.dice(dice)
        self.kworld.produce(r.randrange(0, 4))
        self.kworld.open_transaction(r.randrange(1, 5))
        if r.random() < 0.5:
            self.kworld.produce(r.randrange(1, 4))  # behind the open transaction
        self.dag_run(self.new_run(self.pipes["kafka"]), self.draw_fault(r))
        abort = r.random() < 0.4
        self.kworld.end_transaction(abort=abort)
        REPORT.count("events", "kafka_load_during_open_transaction_" + ("aborted" if abort else "committed"))

    @rule(dice=DICE)
    def two_runs_at_once(self, dice: int) -> None:
        """Two DAG runs of the pipeline planning and loading at the same moment."""
        r = self.dice(dice)
        self.kworld.produce(r.randrange(1, 6))
        runs = [self.new_run(self.pipes["kafka"]), self.new_run(self.pipes["kafka"])]
        REPORT.count("events", "two_runs_at_once")
        faults = [self.draw_fault(r) for _ in runs]
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda i: self.dag_run(runs[i], faults[i]), range(2)))

    # -- the end of a trial ----------------------------------------------------------------
    def drain(self) -> list[str]:
        """Faults stop, the open transaction ends: every failed run is cleared (and re-frozen
        where the runbook says so), then the pipeline runs until it has nothing left."""
        wedged: list[str] = []
        self.kworld.end_transaction(abort=self.rng.random() < 0.5)
        if self.kworld.wait_markers() > 0:
            REPORT.count("events", "kafka_waited_for_markers")
        for run in list(self.runs):
            if not run.done and not self._settle(run):
                wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:] or 'no error'}")
        # A cap counts offsets, and a transaction's markers take offsets too (one per partition
        # it wrote to, so at most one per record): at most twice as many offsets as records.
        offsets = 2 * len(self.kworld.fate)
        bound = -(-offsets // (self.cap or offsets or 1)) + 4
        for _ in range(bound):
            run = self.new_run(self.pipes["kafka"])
            if not self._settle(run):
                wedged.append(f"{run.token} ({run.pipe.pipeline_id}): {run.errors[-1:]}")
                break
            if not self._last_loaded_something:
                break
        else:
            wedged.append(f"chaos.kafka: still loading after {bound} batches of at most {self.cap} offsets")
        return wedged

    def teardown(self) -> None:
        try:
            os.environ.pop(ENV_VAR, None)
            if not hasattr(self, "kworld"):
                return
            REPORT.trials += 1
            started = time.monotonic()
            wedged = self.drain()
            REPORT.count("events", "kafka_drain_seconds", round(time.monotonic() - started))
            verdict, broker = check_kafka_table(self.kworld, self.table)
            REPORT.count("events", "kafka_rows_checked", verdict.rows)
            for kind, n in self.kworld.kinds.items():
                REPORT.count("events", f"kafka_{kind}", n)
            REPORT.duplicates += len(verdict.duplicates)
            REPORT.losses += len(verdict.losses)
            REPORT.wrong_rows += len(verdict.wrong)
            REPORT.wedged += len(wedged)
            findings = (
                [f"{f.kind}: {f.message}" for f in audit_table(ref(self.table)).errors]
                if exists(self.table)
                else []
            )
            REPORT.audit_errors += len(findings)
            problems = (
                [f"duplicate: {d}" for d in verdict.duplicates]
                + [f"loss: {d}" for d in verdict.losses]
                + [f"wrong: {d}" for d in verdict.wrong]
                + [f"wedged: {w}" for w in wedged]
                + [f"audit: {f}" for f in findings]
                + [f"broker: {b}" for b in broker]
                + self.problems
            )
            if problems:
                REPORT.samples.setdefault("kafka_problem", problems[0])  # in the run's summary too
            assert not problems, "chaos kafka trial broke the guarantee:\n" + "\n".join(problems[:40])
        finally:
            if hasattr(self, "kworld"):
                self.kworld.close()
            shutil.rmtree(self.tmp, ignore_errors=True)
            remove_world(self.tmp)


# The append trial's own rules (its landings, JDBC changes, drift, Delta Spark...) are not a
# Kafka trial's: a rule is found by name on the class, so a plain attribute of the same name
# hides it. A rule added to ChaosMachine later is hidden here too unless it is shared.
for _rule in ChaosMachine.setup_state().rules:
    _name = _rule.function.__name__
    if _name not in SHARED_RULES and _name not in vars(KafkaChaosMachine):
        setattr(KafkaChaosMachine, _name, None)
