"""Local storage that behaves as an object store can when a reply is lost: the backends of
the unknown-outcome tests (tests/core/test_attempt_id.py)."""

from __future__ import annotations

from airflow_eod.core.storage import LocalStorage, UnknownOutcome


class _LosesReplies(LocalStorage):
    """Counts puts-if-absent; the first ``lose`` of them lose their reply.

    :param root: the directory.
    :param lose: how many replies to lose.
    """

    def __init__(self, *, root: str, lose: int = 1) -> None:
        super().__init__(root=root)
        self.lose = lose
        self.puts = 0


class LandsThenLosesTheReply(_LosesReplies):
    """The first ``lose`` puts-if-absent land, then raise :class:`UnknownOutcome` (a timeout
    after the object store wrote the object); later ones behave."""

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        self.puts += 1
        wrote = super().put_if_absent(key, data, attempt=attempt)
        if self.puts <= self.lose:
            raise UnknownOutcome(f"reply lost after the put of {key} (it wrote: {wrote})")
        return wrote


class FailsBeforeLanding(_LosesReplies):
    """The first ``lose`` puts-if-absent raise :class:`UnknownOutcome` without writing (a
    timeout before the request reached the store); later ones behave."""

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        self.puts += 1
        if self.puts <= self.lose:
            raise UnknownOutcome(f"the put of {key} timed out before it was sent")
        return super().put_if_absent(key, data, attempt=attempt)
