"""The per-batch cap of the Kafka source, split over partitions (no broker, no JVM)."""

from __future__ import annotations

import itertools
import random

from airflow_eod.sources.kafka_offsets import split_cap

P = [("t", i) for i in range(4)]


def test_no_cap_or_a_backlog_under_it_takes_everything() -> None:
    backlog = {P[0]: 7, P[1]: 0, P[2]: 3}
    assert split_cap(backlog, None) == backlog
    assert split_cap(backlog, 10) == backlog
    assert split_cap(backlog, 100) == backlog


def test_the_cap_splits_in_proportion_to_each_backlog() -> None:
    assert split_cap({P[0]: 12, P[1]: 3, P[2]: 0}, 5) == {P[0]: 4, P[1]: 1, P[2]: 0}
    assert split_cap({P[0]: 50, P[1]: 50}, 10) == {P[0]: 5, P[1]: 5}
    assert split_cap({P[0]: 30, P[1]: 60, P[2]: 90}, 18) == {P[0]: 3, P[1]: 6, P[2]: 9}


def test_a_partition_far_behind_a_busy_one_is_not_starved() -> None:
    # In proportion alone, 1 against 1000 under a cap of 10 gets 0: batch after batch, for
    # as long as the busy partition's backlog keeps growing.
    assert split_cap({P[0]: 1000, P[1]: 1}, 10) == {P[0]: 9, P[1]: 1}
    assert split_cap({P[0]: 10**6, P[1]: 2, P[2]: 1}, 3) == {P[0]: 1, P[1]: 1, P[2]: 1}


def test_a_cap_below_the_partitions_waiting_takes_the_largest_backlogs_first() -> None:
    taken = split_cap({P[0]: 1, P[1]: 9, P[2]: 5, P[3]: 0}, 2)
    assert taken == {P[0]: 0, P[1]: 1, P[2]: 1, P[3]: 0}
    # Ties go by topic and partition: the same split whoever plans it.
    assert split_cap({P[0]: 4, P[1]: 4, P[2]: 4}, 1) == {P[0]: 1, P[1]: 0, P[2]: 0}


def test_the_split_takes_exactly_the_cap_within_each_backlog_whatever_the_order() -> None:
    rng = random.Random(23)
    for _ in range(500):
        backlog = {tp: rng.choice([0, 0, 1, 2, rng.randrange(1, 10_000)]) for tp in P}
        cap = rng.randrange(1, 50)
        taken = split_cap(backlog, cap)
        assert sum(taken.values()) == min(cap, sum(backlog.values()))
        assert all(0 <= taken[tp] <= backlog[tp] for tp in P)
        if sum(backlog.values()) > cap and sum(1 for n in backlog.values() if n) <= cap:
            assert all(taken[tp] >= 1 for tp in P if backlog[tp])  # nobody waiting starves
        for order in itertools.islice(itertools.permutations(P), 3):
            assert split_cap({tp: backlog[tp] for tp in order}, cap) == taken
