"""The attempt in progress, set once where an attempt starts and read where it is needed.

A fault point armed for one try (``after_commit=raise@2``) must know which try reaches it.
Threading the try number through every commit and clean-up function made it a parameter of
the protocol that the protocol never uses, so it lives here instead: ``load_batch`` (the
one entry point of every load) and ``run_load`` (which a submitted driver runs in its own
process) each open :func:`attempt` with the try number Airflow gave them, and
:mod:`airflow_eod.core.faults` reads :func:`current_try`.

The attempt also has an id, which every body it writes with put-if-absent carries (a plan, a
claim, a commit record, a Delta commit's manifest): after a write whose outcome is unknown
(a timeout after the write landed), the writer reads the object back and knows it for its
own by the id (see :func:`airflow_eod.core.storage.base.settle_put`). One attempt has one id
everywhere: a load's spec takes the id of the attempt that builds it, and a submitted driver
opens its attempt with the spec's id.

A context variable, not a global: racing attempts in one process (threads of a test, or an
Airflow worker running two tries side by side) each see their own try and id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from airflow_eod.core.table_layout import path_part

_try_number: ContextVar[int | None] = ContextVar("airflow_eod_try_number", default=None)
_attempt_id: ContextVar[str | None] = ContextVar("airflow_eod_attempt_id", default=None)


def new_attempt_id() -> str:
    """A fresh attempt id: 16 hex digits, one safe name (it names staging directories)."""
    return uuid.uuid4().hex[:16]


# A driver that its cluster starts again (YARN's application re-attempts of a cluster-mode
# driver) runs the same spec: it is another attempt, with an id of its own derived from the
# spec's, so that it stages beside, not over, what the dead run left, and the task still
# knows the commit for its own.
_RERUN_MARK = ".r"


def rerun_attempt_id(attempt_id: str, run: int) -> str:
    """The id of the ``run``-th start of the driver of ``attempt_id`` (itself for the first).

    :param attempt_id: the spec's attempt id.
    :param run: which start this is (YARN's application attempt number).
    """
    return attempt_id if run <= 1 else f"{attempt_id}{_RERUN_MARK}{run}"


def same_attempt(committed: str | None, attempt_id: str) -> bool:
    """Whether ``committed`` (the attempt id of a commit) is ``attempt_id`` or a re-run of it
    by the cluster (:func:`rerun_attempt_id`)."""
    if committed is None:
        return False
    if committed == attempt_id:
        return True
    head, mark, run = committed.rpartition(_RERUN_MARK)
    return bool(mark) and head == attempt_id and run.isdigit()


@contextmanager
def attempt(try_number: int | None, attempt_id: str | None = None) -> Iterator[None]:
    """Run the body as try ``try_number`` (``None``: no Airflow try, e.g. a script) of the
    attempt ``attempt_id``.

    :param try_number: the Airflow try number of this attempt.
    :param attempt_id: the id of this attempt (a fresh one when ``None``); it names the
        attempt's staging directory and spec, so it must be one safe name.
    :raises UnsafePathError: when ``attempt_id`` is no safe name.
    """
    ident = new_attempt_id() if attempt_id is None else path_part(attempt_id, "attempt id")
    try_token = _try_number.set(try_number)
    id_token = _attempt_id.set(ident)
    try:
        yield
    finally:
        _attempt_id.reset(id_token)
        _try_number.reset(try_token)


def current_try() -> int | None:
    """The try number of the attempt in progress, or ``None`` outside any attempt."""
    return _try_number.get()


def current_attempt_id() -> str:
    """The id of the attempt in progress; outside any attempt (a script, a test), a fresh id
    per call, so that two writes outside an attempt never pass for each other's."""
    ident = _attempt_id.get()
    return new_attempt_id() if ident is None else ident
