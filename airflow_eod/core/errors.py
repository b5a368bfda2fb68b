"""Errors raised by the protocol core; every batch error names the batch and the cause."""

from __future__ import annotations


class EodError(Exception):
    """Base class for every error airflow-eod raises on purpose."""


class BatchError(EodError):
    """A batch cannot be loaded; the message names the batch and the cause.

    :param batch: the batch key, or ``pipeline/batch`` label, the error is about.
    :param cause: what went wrong, in words a data engineer can act on.
    """

    def __init__(self, batch: str | None, cause: str) -> None:
        self.batch = batch
        self.cause = cause
        super().__init__(f"batch {batch}: {cause}" if batch else cause)


class InputChangedError(BatchError):
    """A frozen input (a landing file) changed after the batch was planned (invariant I3)."""


class SchemaMismatchError(BatchError):
    """The batch's schema differs from the target table's schema."""


class UnsupportedTableError(EodError):
    """The target table uses a feature the commit engine cannot honour, or is not a Delta table."""


class PlanLogError(EodError):
    """A plan-log entry is missing, corrupt or was edited by hand."""


class ConfigurationError(EodError):
    """The load was configured in a way that cannot work (bad pipeline id, bad URI, ...)."""


class MalformedInputError(BatchError):
    """Records of the batch do not parse or do not fit the schema."""


class RetentionWindowError(BatchError):
    """The batch is older than the table's transaction-retention window (invariant I5)."""


class CorruptRecordError(PlanLogError):
    """A durable commit record says a batch landed where the table says it did not."""
