"""The checker of a Kafka trial: the table, row by row, against the records the trial
produced and committed, after those were checked against what the broker holds."""

from __future__ import annotations

from collections import Counter

from tests.chaos.kafka_world import KafkaWorld, Record, table_rows
from tests.chaos.oracle import Verdict
from tests.chaos.store import exists


def check_kafka_table(
    world: KafkaWorld, table: str, verdict: Verdict | None = None
) -> tuple[Verdict, list[str]]:
    """Every committed record in ``table`` once, nothing else (no aborted record, no record
    of another topic, no value at another offset).

    :param world: the trial's topic and what it produced.
    :param table: the trial's table (there may be none: nothing was ever loaded).
    :returns: the verdict on the table, and where the broker disagrees with the world's
        record of what was produced (a fault of the harness or the broker, not of the load).
    """
    verdict = verdict if verdict is not None else Verdict()
    expected = world.committed()
    held = world.held()
    broker = _differences(Counter(held), Counter(expected), "broker holds", "world produced")
    got = Counter(table_rows(table)) if exists(table) else Counter[Record]()
    want = Counter(expected)
    verdict.rows += sum(got.values())
    for row, n in sorted(got.items()):
        if n > 1:
            verdict.duplicates.append(f"{row} in the table {n} times")
    for row in sorted(want - got):
        verdict.losses.append(f"{row} committed to Kafka, not in the table")
    for row in sorted(set(got) - set(want)):
        verdict.wrong.append(f"{row} in the table, never committed to Kafka")
    return verdict, broker


def _differences(a: Counter[Record], b: Counter[Record], a_name: str, b_name: str) -> list[str]:
    only_a, only_b = a - b, b - a
    return [f"{a_name} {r}, {b_name} did not" for r in sorted(only_a)][:10] + [
        f"{b_name} {r}, {a_name} did not" for r in sorted(only_b)
    ][:10]
