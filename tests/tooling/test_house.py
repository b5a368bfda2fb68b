"""The checks of the house a reviewer can repeat (issue 20): no module over 450 lines, one
definition of the table reference, and no function below the entry points that takes a
table as a bare string. The import contracts (no circle, no import from a lower layer to a
higher one, type-checking imports included) are ``lint-imports``'s, run by ``make lint``.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Any

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "airflow_eod"

# Where a user names a table as a string: the operators, the sensor and its trigger (whose
# fields are templated or serialized strings), the CLI, the operator's extra link, and the
# examples (the demo and its independent row checker, which never use the core's reader).
ENTRY_POINTS = ("operators/", "sensors/", "triggers/", "links/", "examples/", "cli.py")
# The one documented Python entry point below them: it takes a string or a TableRef
# (``TableLike``) and parses it once, as the CLI does.
# ``hooks/object_store.table_ref`` is how the operators, the sensor and its trigger parse a
# rendered ``table_uri`` (once), with the connection's storage options.
PUBLIC_FUNCTIONS = {("core/audit/verify.py", "audit_table"), ("hooks/object_store.py", "table_ref")}
# Parameter names that hold a table.
TABLE_PARAMS = {"table_uri", "table_path", "quarantine_uri", "main_table_uri", "table", "ref"}
# The errors hold the table's location as text, for their message and for whoever catches
# them; they take no table to read.
MESSAGES = "core/errors.py"


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE)), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _is_str(annotation: ast.expr | None) -> bool:
    """Whether an annotation is ``str`` or ``str | None`` (``TableLike`` is not)."""
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace(" ", "")
    return text in ("str", "str|None", "None|str", "Optional[str]")


def test_no_module_is_over_450_lines() -> None:
    long = {
        rel: n
        for rel, n in (
            (str(p.relative_to(PACKAGE)), len(p.read_text().splitlines())) for p in PACKAGE.rglob("*.py")
        )
        if n > 450
    }
    assert long == {}


def test_the_table_reference_is_defined_once() -> None:
    """One class, in core/table_ref.py; and the URI parsing that builds it lives there only
    (no other module turns a table string into a path)."""
    defined = [
        rel
        for rel, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.ClassDef) and n.name == "TableRef"
    ]
    assert defined == ["core/table_ref.py"]
    parsers = {"local_path", "normalise", "table_asset_uri", "table_dir", "_local_path"}
    found = [
        (rel, n.name)
        for rel, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name in parsers
    ]
    assert found == [("core/table_ref.py", "_local_path")]


def test_no_function_below_the_entry_points_takes_a_table_as_a_string() -> None:
    offenders: list[Any] = []
    for rel, tree in _modules():
        if rel.startswith(ENTRY_POINTS) or rel in ("core/table_ref.py", MESSAGES):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if (rel, node.name) in PUBLIC_FUNCTIONS:
                continue
            args = node.args
            for arg in args.posonlyargs + args.args + args.kwonlyargs:
                if arg.arg in TABLE_PARAMS and _is_str(arg.annotation):
                    offenders.append(f"{rel}:{node.lineno} {node.name}({arg.arg}: str)")
    assert offenders == []


def test_the_check_sees_a_table_string_where_there_is_one() -> None:
    """The check above can fail: it names a function that takes ``table_uri: str``."""
    tree = ast.parse("def f(table_uri: str, *, ref: 'str | None' = None) -> None: ...")
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    flagged = [
        a.arg for a in fn.args.args + fn.args.kwonlyargs if a.arg in TABLE_PARAMS and _is_str(a.annotation)
    ]
    assert flagged == ["table_uri"]
