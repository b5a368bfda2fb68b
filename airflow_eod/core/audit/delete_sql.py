"""A merge's delete marker (``delete_when``, Spark SQL) as an expression the audit may run.

The audit reads live rows with delta-rs's SQL engine (DataFusion), and the marker comes
from a manifest, which is table content: it runs no text it did not check (invariant I11).
Only the plain predicates a delete marker is made of pass: the table's columns, string and
number literals, comparisons, ``AND``/``OR``/``NOT``, ``IN (...)``, ``IS [NOT] NULL``,
``TRUE``/``FALSE`` and parentheses. Anything else (a function call, a subquery, a string
with a backslash escape) is not run: the audit then does not know whether a live row is a
delete, and says so.

Spark's meaning is kept where the two dialects differ: a column name is matched without
regard to case (Spark's default), and a double-quoted text is a string (an identifier in
DataFusion).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>'(?:[^'\\]|'')*')
      | (?P<quoted>"(?:[^"\\]|"")*")
      | (?P<backquoted>`[^`]+`)
      | (?P<number>\d+(?:\.\d+)?)
      | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE"}


def quote(column: str) -> str:
    """``column`` as a DataFusion identifier, its case kept (unquoted names are lowered)."""
    return '"' + column.replace('"', '""') + '"'


def delete_sql(expression: str, columns: list[str]) -> str | None:
    """``expression`` as a DataFusion predicate over a table with ``columns``, true for a
    deleting row (a null is false, as in the merge); ``None`` when it holds anything but
    the plain predicates this module lets through."""
    by_name = {c.lower(): c for c in columns}
    out: list[str] = []
    pos = 0
    while expression[pos:].strip():
        m = _TOKEN.match(expression, pos)
        if m is None or m.lastgroup is None:
            return None
        pos, kind, text = m.end(), m.lastgroup, m.group(m.lastgroup)
        if kind == "string" or kind == "number":
            out.append(text)
        elif kind == "quoted":
            out.append("'" + text[1:-1].replace('""', '"').replace("'", "''") + "'")
        elif kind == "op":
            out.append("=" if text == "==" else text)
        elif kind == "word" and text.upper() in _KEYWORDS:
            out.append(text.upper())
        else:
            name = text[1:-1] if kind == "backquoted" else text
            if name.lower() not in by_name:
                return None
            out.append(quote(by_name[name.lower()]))
    return f"COALESCE(CAST(({' '.join(out)}) AS BOOLEAN), FALSE)" if out else None
