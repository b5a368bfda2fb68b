"""The attempt in progress, set once where an attempt starts and read where it is needed.

A fault point armed for one try (``after_commit=raise@2``) must know which try reaches it.
Threading the try number through every commit and clean-up function made it a parameter of
the protocol that the protocol never uses, so it lives here instead: ``load_batch`` (the
one entry point of every load) and ``run_load`` (which a submitted driver runs in its own
process) each open :func:`attempt` with the try number Airflow gave them, and
:mod:`airflow_eod.core.faults` reads :func:`current_try`.

A context variable, not a global: racing attempts in one process (threads of a test, or an
Airflow worker running two tries side by side) each see their own try.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_try_number: ContextVar[int | None] = ContextVar("airflow_eod_try_number", default=None)


@contextmanager
def attempt(try_number: int | None) -> Iterator[None]:
    """Run the body as try ``try_number`` (``None``: no Airflow try, e.g. a script).

    :param try_number: the Airflow try number of this attempt.
    """
    token = _try_number.set(try_number)
    try:
        yield
    finally:
        _try_number.reset(token)


def current_try() -> int | None:
    """The try number of the attempt in progress, or ``None`` outside any attempt."""
    return _try_number.get()
