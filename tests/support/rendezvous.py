"""Rendezvous for race tests: processes meet at the commit engine's ``before_commit`` point.

A race test must prove that its racers overlapped (each asked before any of them
committed), not assume it from a sleep that a loaded machine outlasts. A party arrives by
creating a file named for it in a directory, then waits until the directory holds as many
arrivals as there are parties. Files work across every kind of process (a spawned pool
worker, a ``python -c`` child) and stay behind as the proof that every party got there.

The deadlines are only wedge guards: a party that waits longer than ``DEADLINE`` raises
:class:`RendezvousTimeout`, which fails the test loudly; it never lets a race go ahead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import airflow_eod.core.load_commit as load_commit

# Long enough for a machine under any load we have seen; expiring means a party is gone.
DEADLINE = 300.0
_POLL = 0.005


class RendezvousTimeout(AssertionError):
    """A party waited past the deadline: some other party never arrived (the test fails).

    An ``AssertionError``, not a ``TimeoutError``: the commit engine turns ``OSError`` (which
    ``TimeoutError`` is) into a ``BatchError``, and this must not pass for a commit failure.
    """


def arrivals(directory: str) -> list[str]:
    """The parties that have arrived at the rendezvous in ``directory``, sorted."""
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def wait_for(directory: str, parties: int, deadline: float = DEADLINE) -> list[str]:
    """Wait until ``parties`` parties have arrived in ``directory``; their names.

    :raises RendezvousTimeout: after ``deadline`` seconds.
    """
    end = time.monotonic() + deadline
    while len(here := arrivals(directory)) < parties:
        if time.monotonic() > end:
            raise RendezvousTimeout(
                f"rendezvous {directory}: {len(here)} of {parties} parties arrived within "
                f"{deadline:g} s ({here}); the others are wedged or dead"
            )
        time.sleep(_POLL)
    return here


def arrive(directory: str, party: str) -> None:
    """Mark ``party`` as arrived in ``directory`` (without waiting)."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, party), "x"):
        pass


def meet(directory: str, party: str, parties: int, deadline: float = DEADLINE) -> None:
    """Arrive as ``party`` and wait until all ``parties`` have arrived."""
    arrive(directory, party)
    wait_for(directory, parties, deadline)


@contextmanager
def meeting_before_commit(
    directory: str, party: str, parties: int, deadline: float = DEADLINE
) -> Iterator[list[str]]:
    """Within the block, the first time this process reaches the commit engine's
    ``before_commit`` point (after its ask, before its commit or table creation), it meets
    the other parties in ``directory``; later passes go straight on. The fault point itself
    still fires afterwards. Yields a list that holds ``party`` once the meeting took place.
    """
    # Patching a name that is not there would hold nothing and let the race go unproven.
    assert callable(getattr(load_commit, "fault_point", None)), "load_commit has no fault_point"
    real = load_commit.fault_point  # type: ignore[attr-defined]
    met: list[str] = []

    def point(name: str) -> None:
        if name == "before_commit" and not met:
            meet(directory, party, parties, deadline)
            met.append(party)
        real(name)

    load_commit.fault_point = point  # type: ignore[attr-defined,assignment]
    try:
        yield met
    finally:
        load_commit.fault_point = real  # type: ignore[attr-defined,assignment]
