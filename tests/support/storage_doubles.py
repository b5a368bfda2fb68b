"""Local storage that behaves as an object store can when a reply is lost: the backends of
the unknown-outcome tests (tests/core/test_attempt_id.py)."""

from __future__ import annotations

from airflow_eod.core.storage import LocalStorage, UnknownOutcome


class LandsThenLosesTheReply(LocalStorage):
    """The first ``lose`` puts-if-absent land, then raise :class:`UnknownOutcome` (a timeout
    after the object store wrote the object); later ones behave.

    :param root: the directory.
    :param lose: how many replies to lose.
    """

    def __init__(self, *, root: str, lose: int = 1) -> None:
        super().__init__(root=root)
        self.lose = lose
        self.puts = 0

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        self.puts += 1
        wrote = super().put_if_absent(key, data, attempt=attempt)
        if self.puts <= self.lose:
            raise UnknownOutcome(f"reply lost after the put of {key} (it wrote: {wrote})")
        return wrote


class FailsBeforeLanding(LocalStorage):
    """The first ``lose`` puts-if-absent raise :class:`UnknownOutcome` without writing (a
    timeout before the request reached the store); later ones behave.

    :param root: the directory.
    :param lose: how many puts to drop.
    """

    def __init__(self, *, root: str, lose: int = 1) -> None:
        super().__init__(root=root)
        self.lose = lose
        self.puts = 0

    def put_if_absent(self, key: str, data: bytes, *, attempt: str | None = None) -> bool:
        self.puts += 1
        if self.puts <= self.lose:
            raise UnknownOutcome(f"the put of {key} timed out before it was sent")
        return super().put_if_absent(key, data, attempt=attempt)
