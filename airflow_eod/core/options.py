"""The operators' enumerated options, and the checks that need no Spark, no table and no
source, so that they run when a DAG file is parsed.

A typo in an option, a schema that does not parse, a table URI of a scheme this release
cannot write or a partition column the schema does not have would otherwise fail every try
of the task, one after another. Checked here, it is an import error of the DAG in the UI.
A value that is still a Jinja template is checked when it is rendered, at run time.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.table_ref import TableRef

Engine = Literal["delta-rs", "delta-spark"]
SchemaDrift = Literal["fail", "add_columns"]
WriteMode = Literal["append", "merge"]
Boundary = Literal["offsets", "interval"]
FileFormat = Literal["csv", "json", "parquet"]
KeyType = Literal["integer", "timestamp"]
Execution = Literal["local", "submit"]
NullKeys = Literal["warn", "fail"]

ENGINES: tuple[str, ...] = get_args(Engine)
SCHEMA_POLICIES: tuple[str, ...] = get_args(SchemaDrift)
BOUNDARIES: tuple[str, ...] = get_args(Boundary)
FORMATS: tuple[str, ...] = get_args(FileFormat)
KEY_TYPES: tuple[str, ...] = get_args(KeyType)
EXECUTION_MODES: tuple[str, ...] = get_args(Execution)
NULL_KEY_POLICIES: tuple[str, ...] = get_args(NullKeys)


def choice(name: str, value: Any, allowed: tuple[str, ...]) -> Any:
    """``value`` if it is one of ``allowed``; a :class:`ConfigurationError` naming the option
    and the choices otherwise."""
    if value not in allowed:
        raise ConfigurationError(f"{name} {value!r} is not one of {allowed}")
    return value


def check_engine_options(
    engine: str, *, restate: Any = False, restate_batch_key: Any = None, quarantine_table_uri: Any = None
) -> None:
    """Refuse the options the ``delta-spark`` engine cannot honour, naming the engine and the
    option. Delta Spark's append commits only its own new files: it cannot remove the old
    generation's files in the commit that adds the new ones (restatement), nor carry a
    quarantine outbox that is delivered with the batch.

    A templated ``restate`` counts as a request: a DAG that may restate needs ``delta-rs``.
    """
    if engine != "delta-spark":
        return
    asked = [
        name
        for name, value in (
            ("restate", restate),
            ("restate_batch_key", restate_batch_key),
            ("quarantine_table_uri", quarantine_table_uri),
        )
        if value not in (None, False, "", "false", "False")
    ]
    if asked:
        raise ConfigurationError(
            f"engine='delta-spark' does not support {' or '.join(asked)}: Delta Spark's append "
            "cannot swap a batch's generations in one commit, nor deliver a quarantine with it; "
            "use engine='delta-rs' (the default) for a pipeline that restates or quarantines"
        )


def is_template(value: Any) -> bool:
    """Whether ``value`` is rendered by Jinja before the task runs (checked then, not now)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


# The object stores (canonical table schemes) a submitted driver loads into.
SUBMIT_STORES = ("s3", "hdfs")


def check_object_store_load(table: TableRef, *, engine: str, execution: str, quarantine: str | None) -> None:
    """What a load into a table on an object store does not do in this release, refused before
    anything is planned or written (the task ends: no retry changes it), and a quarantine table
    out of the load's reach (on another store than the table)."""
    if quarantine is not None and not is_template(quarantine):
        table.neighbour(quarantine, "quarantine_table_uri")
    if table.is_local:
        return
    why = None
    if engine != "delta-rs" and table.scheme != "hdfs":
        # Delta Spark commits to S3 through a log store that is safe for one driver only
        # (S3SingleDriverLogStore): two racing attempts could both commit. On HDFS its
        # HDFSLogStore commits with a rename without overwrite, which the NameNode makes atomic.
        why = f"engine={engine!r} (use engine='delta-rs', which commits with the store's conditional put)"
    elif execution != "local" and table.scheme not in SUBMIT_STORES:
        # A submitted driver gets the table's storage options in its environment and writes
        # over s3a (or hdfs, natively); Spark's writes to Azure and GCS are not supported yet.
        why = f"execution={execution!r} (a submitted driver writes to S3 or HDFS only; use 'local')"
    if why:
        raise ConfigurationError(
            f"table {table} is on {'HDFS' if table.scheme == 'hdfs' else 'an object store'}: this release "
            f"does not load into one with {why}"
        )


def check_table_uri(name: str, uri: Any) -> None:
    """A table URI this release can write: a local or shared-filesystem path, or ``file://``."""
    if uri is None or is_template(uri):
        return
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigurationError(f"{name} must be a path or a file:// URI, not {uri!r}")
    try:
        TableRef.parse(uri)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


# -- Spark DDL, parsed without a JVM ------------------------------------------------------
# The type names Spark's DDL parser takes (case-insensitive); parametrised and nested types
# are checked for their brackets and their element types.
def check_partition_columns(partition_by: list[str], columns: list[str] | None) -> None:
    """Partition columns that the (declared) schema has."""
    if columns is None:
        return
    known = {c.lower() for c in columns}
    missing = [c for c in partition_by if not is_template(c) and c.lower() not in known]
    if missing:
        raise ConfigurationError(f"partition_by {missing} are not columns of the schema {columns}")


def check_catch_up(catch_up: Any, max_batches_per_run: Any) -> None:
    """Refuse, when the DAG is parsed, catch-up settings that cannot work."""
    if not isinstance(catch_up, bool):
        raise ConfigurationError(f"catch_up must be True or False, not {catch_up!r}")
    if max_batches_per_run is None:
        return
    limit = max_batches_per_run
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigurationError(f"max_batches_per_run must be a whole number of at least 1, not {limit!r}")
    if not catch_up:
        raise ConfigurationError("max_batches_per_run limits a catch-up run: pass catch_up=True as well")


def check_catch_up_boundary(catch_up: bool, boundary: str) -> None:
    """Catching up plans offset batch after offset batch; an interval batch is the run's own
    data interval, one per run, so there is nothing to catch up in one task (Airflow's
    catchup and backfills run the missed intervals)."""
    if catch_up and boundary != "offsets":
        raise ConfigurationError(
            f"catch_up=True needs boundary='offsets' (this task's is {boundary!r}): an interval "
            "batch is one DAG run's data interval; missed intervals are caught up by Airflow "
            "(catchup=True, or `airflow backfill create`)"
        )
