"""The operators' enumerated options, and the checks that need no Spark, no table and no
source, so that they run when a DAG file is parsed.

A typo in an option, a schema that does not parse, a table URI of a scheme this release
cannot write or a partition column the schema does not have would otherwise fail every try
of the task, one after another. Checked here, it is an import error of the DAG in the UI.
A value that is still a Jinja template is checked when it is rendered, at run time.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.table_layout import local_path

Engine = Literal["delta-rs", "delta-spark"]
SchemaDrift = Literal["fail", "add_columns"]
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


def check_table_uri(name: str, uri: Any) -> None:
    """A table URI this release can write: a local or shared-filesystem path, or ``file://``."""
    if uri is None or is_template(uri):
        return
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigurationError(f"{name} must be a path or a file:// URI, not {uri!r}")
    try:
        local_path(uri)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


# -- Spark DDL, parsed without a JVM ------------------------------------------------------
# The type names Spark's DDL parser takes (case-insensitive); parametrised and nested types
# are checked for their brackets and their element types.
_SIMPLE = {
    "boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint", "long",
    "float", "real", "double", "string", "binary", "date", "timestamp", "timestamp_ntz",
    "timestamp_ltz", "void", "variant",
}  # fmt: skip
_DECIMAL = {"decimal", "dec", "numeric"}
_LENGTH = {"varchar", "char", "character"}  # a length is required
_NAME = re.compile(r"\s*(`(?:[^`]|``)+`|[A-Za-z0-9_]+)\s*:?\s*")
_UNITS = ("year", "month", "day", "hour", "minute", "second")
_TIMESTAMP_WORDS = re.compile(r"timestamp\s+with(out)?\s+(local\s+)?time\s+zone")


def _strip_comments(text: str) -> str:
    """``text`` without SQL comments (``-- ...`` to the line's end, ``/* ... */``) outside
    quotes; a quote may hold a backslash-escaped quote."""
    out, i, quote = [], 0, ""
    while i < len(text):
        ch = text[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
            out.append(ch)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("an unclosed /* comment")
            i = end + 2
            out.append(" ")
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _split(text: str, sep: str = ",") -> list[str]:
    """``text`` split at ``sep`` outside brackets, quotes and backticks."""
    parts, depth, quote, start, escaped = [], 0, "", 0, False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\" and quote != "`":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"`":
            quote = ch
        elif ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
            if depth < 0:
                raise ValueError(f"an unmatched {ch!r}")
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth or quote:
        raise ValueError("an unclosed bracket or quote")
    parts.append(text[start:])
    return parts


def _field(text: str) -> tuple[str, str]:
    """``(name, type)`` of ``name [:] TYPE [COLLATE c] [NOT NULL] [COMMENT '...']``."""
    m = _NAME.match(text)
    if m is None:
        raise ValueError(f"{text.strip()!r} does not start with a column name")
    name = m.group(1).strip("`").replace("``", "`")
    rest = re.sub(
        r"""(?is)\s+comment\s+('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*$""", "", text[m.end() :].strip()
    )
    rest = re.sub(r"(?i)\s+not\s+null\s*$", "", rest).strip()
    rest = re.sub(r"(?i)^(string|varchar\s*\(\s*\d+\s*\)|char\s*\(\s*\d+\s*\))\s+collate\s+\w+$", r"\1", rest)
    if not rest:
        raise ValueError(f"column {name!r} has no type")
    return name, rest


def _check_interval(t: str, tail: str) -> None:
    words = tail.lower().split()
    if not words:
        return  # INTERVAL: a calendar interval
    ok = words[0] in _UNITS and (
        len(words) == 1
        or (len(words) == 3 and words[1] == "to" and words[2] in _UNITS and _same_family(words[0], words[2]))
    )
    if not ok:
        raise ValueError(f"{t!r} is not an interval type (e.g. INTERVAL DAY TO SECOND)")


def _same_family(start: str, end: str) -> bool:
    """YEAR TO MONTH, or a day-time range in order (DAY TO SECOND, HOUR TO MINUTE ...)."""
    a, b = _UNITS.index(start), _UNITS.index(end)
    return (a, b) == (0, 1) or (2 <= a < b)


def _check_type(text: str) -> None:
    t = text.strip()
    low = t.lower()
    head = re.match(r"[a-z_]+", low)
    if head is None:
        raise ValueError(f"{t!r} is not a type")
    word, tail = head.group(0), t[head.end() :].strip()
    if word == "interval":
        return _check_interval(t, tail)
    if word in _SIMPLE and not tail:
        return None
    if word == "time" and (not tail or re.fullmatch(r"\(\s*\d\s*\)", tail)):
        return None
    if _TIMESTAMP_WORDS.fullmatch(low):
        return None
    if word in _DECIMAL:
        m = re.fullmatch(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)", tail)
        if not tail or (m and 1 <= int(m[1]) <= 38 and int(m[2] or 0) <= int(m[1])):
            return None
        raise ValueError(f"{t!r}: a decimal's precision is 1 to 38 and its scale at most its precision")
    if word in _LENGTH and re.fullmatch(r"\(\s*\d+\s*\)", tail):
        return None
    if word in ("array", "map", "struct") and tail.startswith("<") and tail.endswith(">"):
        inner = tail[1:-1]
        if word == "array":
            _check_type(inner)
        elif word == "map":
            kv = _split(inner)
            if len(kv) != 2:
                raise ValueError(f"{t!r}: a map needs a key type and a value type")
            for part in kv:
                _check_type(part)
        elif inner.strip():
            _check_fields(inner)
        return None
    raise ValueError(f"{t!r} is not a Spark SQL type")


def _check_fields(text: str) -> list[str]:
    names: list[str] = []
    for part in _split(text):
        if not part.strip():
            raise ValueError("an empty column (two commas in a row, or a trailing comma)")
        name, type_text = _field(part)
        _check_type(type_text)
        if name.lower() in (n.lower() for n in names):
            raise ValueError(f"column {name!r} twice")
        names.append(name)
    return names


def ddl_columns(name: str, ddl: str) -> list[str]:
    """The top-level column names of the Spark DDL schema ``ddl``.

    :raises ConfigurationError: when it does not parse, naming the option and the cause.
    """
    try:
        text = _strip_comments(ddl).strip()
        # Spark reads a whole "STRUCT<...>" as the list of its fields.
        if text.lower().startswith("struct") and text[6:].lstrip().startswith("<") and text.endswith(">"):
            text = text[6:].lstrip()[1:-1]
        return _check_fields(text)
    except ValueError as exc:
        raise ConfigurationError(f"{name} {ddl!r} is not a Spark DDL schema: {exc}") from None


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
