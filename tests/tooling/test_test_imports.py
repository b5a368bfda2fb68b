"""Every name the tests import from the project's own modules exists.

Many tests import inside the function that needs them (a JVM-free collection, a tier that
may be skipped), so a helper moved from one support module to another breaks only the test
that runs it, and only where that tier runs: the CI of issue 24 failed on
``from tests.support.yarn_runs import batch_commits`` after the helper moved to
``tests.support.dag_children``. This reads every ``from tests... import`` and
``from airflow_eod... import`` in the tests, wherever it sits, and resolves it without
running the test.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
OURS = ("tests", "airflow_eod", "dags", "benchmarks")


def _imports() -> list[tuple[str, int, str, str]]:
    found = []
    for root in ("tests", "benchmarks", "dags"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    if node.module.split(".")[0] in OURS:
                        for alias in node.names:
                            found.append((str(path.relative_to(REPO)), node.lineno, node.module, alias.name))
    return found


def test_every_name_imported_from_the_project_in_the_tests_exists() -> None:
    imports = _imports()
    assert len(imports) > 200, "the walk found too few imports to be reading the tests"
    missing = []
    for where, line, module, name in imports:
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as error:
            # An optional dependency of ours that is not installed (matplotlib for the
            # benchmark charts) is not a moved name.
            if (error.name or "").split(".")[0] in OURS:
                missing.append(f"{where}:{line}: {module} ({error})")
            continue
        if name != "*" and not hasattr(loaded, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ModuleNotFoundError:
                missing.append(f"{where}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)
