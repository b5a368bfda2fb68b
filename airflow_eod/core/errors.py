"""Errors raised by the protocol core; every batch error names the batch and the cause.

Each class says whether another try of the same task can succeed (:attr:`EodError.retryable`):
the operators end a task at once on an error that no retry can fix (a wrong set-up, a schema
that does not match, a changed input, a refusal), so it does not burn its retries, and keep
the retries for the rest (a Spark job that died, commit races lost, I/O).
"""

from __future__ import annotations

from typing import ClassVar


class EodError(Exception):
    """Base class for every error airflow-eod raises on purpose.

    :cvar retryable: whether another try of the same task, unchanged, may succeed.
    """

    retryable: ClassVar[bool] = True


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

    retryable = False


class SchemaMismatchError(BatchError):
    """The batch's schema differs from the target table's schema."""

    retryable = False


class UnsupportedTableError(EodError):
    """The target table uses a feature the commit engine cannot honour, or is not a Delta table."""

    retryable = False


class PlanLogError(EodError):
    """A plan-log entry is missing, corrupt or was edited by hand."""

    retryable = False


class ConfigurationError(EodError):
    """The load was configured in a way that cannot work (bad pipeline id, bad URI, ...)."""

    retryable = False


class MalformedInputError(BatchError):
    """Records of the batch do not parse or do not fit the schema."""

    retryable = False


class RetentionWindowError(BatchError):
    """The batch is older than the table's transaction-retention window (invariant I5)."""

    retryable = False


class BatchRefusedError(BatchError):
    """The batch cannot be loaded as asked, and loading it again will not change that (a
    restatement the table cannot take, data that breaks a table rule)."""

    retryable = False


class UnsafePathError(BatchError):
    """A value from a table, a plan log, a landing directory or a connection would make
    airflow-eod read, write or remove something outside the table or the landing directory
    (a hostile id, ``..``, an absolute path, a link leading out: invariant I11). Nothing was
    read, written or removed there; the way out is to remove what planted the value."""

    retryable = False


class CorruptRecordError(PlanLogError):
    """A durable commit record says a batch landed where the table says it did not."""


class CorruptTableError(UnsupportedTableError):
    """A file of a table (its Delta log) or of its plan log holds content no writer makes:
    JSON of the wrong shape, out of bounds (too large, too deeply nested, too many
    checkpoint parts), or a data file that is a link out of the table.

    :param table: the table's path.
    :param file: the file at fault (a path).
    :param why: what is wrong with it.
    """

    def __init__(self, table: str, file: str, why: str) -> None:
        self.table = table
        self.file = file
        super().__init__(
            f"the table at {table} is corrupt: {file} {why}; no reader can trust it until a person "
            "looks (see docs/runbook.md, 'a corrupt table file')"
        )


class OverlappingIntervalError(BatchRefusedError):
    """A JDBC interval batch overlaps an interval the pipeline already froze or committed:
    loading it would load the rows of the overlap twice."""


class ForeignMarkerError(BatchRefusedError):
    """The table's ``txn`` marker of a batch was set by a commit that carries no airflow-eod
    manifest of that batch: another writer used the pipeline's app id (``eod:...``) in its
    own idempotent write. The batch's rows are not in the table, and no load under that app
    id can add them while the marker stands."""


class NullKeyError(BatchRefusedError):
    """Rows of a JDBC source have a NULL key, which no batch ever loads, and the source
    says ``null_keys="fail"``."""


class RecordsDeletedError(BatchRefusedError):
    """Records a Kafka batch must load were deleted from Kafka (retention, ``DeleteRecords``,
    a deleted topic) before it read them; no retry brings them back."""


class TopicRecreatedError(BatchRefusedError):
    """A topic of a Kafka pipeline was deleted and created again under its name: its offsets
    restart, and the frozen ranges name records of the old topic."""


class KafkaUnavailableError(EodError):
    """The Kafka brokers did not answer (a transient error: another try may succeed)."""
