"""Racers on one key: the proof that a store's put-if-absent has exactly one winner.

Each store's test (tests/core/test_{s3,azure,gcs}_storage.py) hands :func:`race_one_key` one
client per racer, built the same way a task builds its own; the barriers make every racer put
the round's key at one moment, and the round's object must then be the one winner's bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RaceResult:
    """What the rounds showed.

    :param rounds: how many rounds ran.
    :param bad: ``(round, winners)`` of every round without exactly one winner whose bytes
        the key holds.
    :param errors: what any racer raised.
    :param puts: conditional puts sent, summed over the clients' request counters.
    :param elapsed_s: wall time of the rounds.
    """

    rounds: int
    bad: list[tuple[int, list[int]]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    puts: int = 0
    elapsed_s: float = 0.0

    def summary(self, racers: int, where: str) -> str:
        return (
            f"{racers} racers x {self.rounds} rounds on {where}: {self.rounds - len(self.bad)} rounds "
            f"with exactly one winner, {len(self.bad)} without; {self.puts} conditional puts; "
            f"{self.elapsed_s:.1f} s"
        )


def race_one_key(clients: list[Any], *, rounds: int, put_request: str) -> RaceResult:
    """Race ``len(clients)`` threads, one client each, on one fresh key per round.

    :param clients: one storage client per racer (``put_if_absent``, ``get``, ``requests``).
    :param rounds: how many rounds.
    :param put_request: the name the clients count their conditional puts under.
    """
    racers = len(clients)
    barrier = threading.Barrier(racers + 1)  # the racers and this thread, which sets each round's key
    key = ""
    winners: list[int] = []
    lock = threading.Lock()
    result = RaceResult(rounds=rounds)

    def body(n: int) -> bytes:
        return f'{{"attempt": "racer-{n}-{key}"}}'.encode()

    def race(n: int) -> None:
        for _ in range(rounds):
            barrier.wait()  # the main thread has set the round's key
            barrier.wait()
            try:
                if clients[n].put_if_absent(key, body(n), attempt=f"racer-{n}-{key}"):
                    with lock:
                        winners.append(n)
            except BaseException as exc:
                result.errors.append(exc)
            barrier.wait()  # the round is over

    threads = [threading.Thread(target=race, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    started = time.monotonic()
    for r in range(rounds):
        key = f"race/{r:05d}.json"
        winners.clear()
        barrier.wait()
        barrier.wait()
        barrier.wait()
        if len(winners) != 1 or clients[0].get(key) != body(winners[0]):
            result.bad.append((r, list(winners)))
    for t in threads:
        t.join()
    result.elapsed_s = time.monotonic() - started
    result.puts = sum(c.requests[put_request] for c in clients)
    return result
