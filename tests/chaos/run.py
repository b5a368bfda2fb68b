"""Run chaos trials: the pytest tier (``-m chaos``) and ``benchmarks/chaos.py`` both come here."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.chaos.children import CHILDREN
from tests.chaos.machine import RACES, SPARK, ChaosMachine
from tests.chaos.report import REPORT, ChaosReport

PIPELINES = ("append", "merge", "kafka")


def machine_class() -> type[ChaosMachine]:
    """The trials' machine: the append pipelines (the default), the merge pipeline
    (``SPARK["pipeline"] == "merge"``, tests/chaos/merge_machine.py) or the Kafka pipeline
    (``"kafka"``, tests/chaos/kafka_machine.py, with the run's broker in ``SPARK["kafka"]``)."""
    pipeline = SPARK.get("pipeline", "append")
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {', '.join(PIPELINES)}, not {pipeline!r}")
    if pipeline == "merge":
        from tests.chaos.merge_machine import MergeChaosMachine

        return MergeChaosMachine
    if pipeline == "kafka":
        from tests.chaos.kafka_machine import KafkaChaosMachine

        return KafkaChaosMachine
    return ChaosMachine


def run_chunk(spark: Any, *, trials: int, chunk_seed: int, steps: int, shrink: bool) -> str | None:
    """``trials`` trials generated from ``chunk_seed``; the failure text, or ``None``."""
    SPARK["session"] = spark
    machine = seed(chunk_seed)(type(f"ChaosSeed{chunk_seed}", (machine_class(),), {"salt": chunk_seed}))
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    logger = logging.getLogger("airflow_eod")
    level = logger.level
    logger.addHandler(RACES)
    logger.setLevel(logging.INFO)  # the loser's "lost a race" line is logged at INFO
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=trials,
                stateful_step_count=steps,
                deadline=None,
                database=None,
                phases=phases,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            ),
        )
    except Exception:
        return traceback.format_exc()
    finally:
        logger.removeHandler(RACES)
        logger.setLevel(level)
    return None


def run_trials(
    spark: Any,
    *,
    trials: int,
    base_seed: int,
    per_chunk: int = 10,
    steps: int = 12,
    shrink: bool = False,
    say: Callable[[str], None] = print,
) -> ChaosReport:
    """``trials`` trials in chunks of ``per_chunk``, chunk ``i`` seeded ``base_seed + i``.
    A failing chunk is reported with its seed and the next chunk goes on."""
    try:
        _chunks(spark, trials, base_seed, per_chunk, steps, shrink, say)
    finally:
        CHILDREN.close()  # the warm child the last SIGKILL left behind
    return REPORT


def _chunks(
    spark: Any,
    trials: int,
    base_seed: int,
    per_chunk: int,
    steps: int,
    shrink: bool,
    say: Callable[[str], None],
) -> None:
    done = 0
    chunk = 0
    while done < trials:
        n = min(per_chunk, trials - done)
        chunk_seed = base_seed + chunk
        before, failures = REPORT.trials, REPORT.failures
        failure = run_chunk(spark, trials=n, chunk_seed=chunk_seed, steps=steps, shrink=shrink)
        if failure is None and REPORT.failures > failures:
            # A trial counted a failure, and Hypothesis raised nothing (a failure it could not
            # replay is reported as flaky, but not every path does): the chunk failed all the same.
            failure = f"the trials counted {REPORT.failures - failures} failure(s); Hypothesis raised none"
        if failure is not None:
            REPORT.failing_seeds.append(f"{chunk_seed} (replay: --seed {chunk_seed} --trials {n})")
            say(f"chaos: seed {chunk_seed} FAILED:\n{failure}")
        say(f"chaos: seed {chunk_seed}: {REPORT.trials - before} trial(s), {'FAILED' if failure else 'ok'}")
        # The running totals after each chunk: a long run cut short still says where it stood.
        say(f"chaos: so far: {REPORT.trials} trials; " + REPORT.lines()[6][len("chaos: ") :])
        say(REPORT.kill_line())
        done += n
        chunk += 1
