"""A parser for Spark DDL schemas (``"id INT, name STRING"``) that needs no Spark: it checks
that a schema parses and names its columns when a DAG file is parsed, not in every try."""

from __future__ import annotations

import re

from airflow_eod.core.errors import ConfigurationError

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
