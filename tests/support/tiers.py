"""The ``unit`` tier: every test that carries none of the "needs" markers.

pyproject.toml registers the markers in two lists: what a test *needs* (descriptions that
start with ``needs``: a JVM, Airflow, PostgreSQL, a cluster...) and what it *proves*
(``proves``). A test with no needs marker runs anywhere Python runs, without Java or a
server; this plugin (loaded by tests/conftest.py) marks each such test ``unit``, so that
``pytest -m unit`` and ``make test-unit`` select exactly them, and a new needs marker added
to pyproject.toml takes its tests out of the tier without a change here.

A unit test that asks for a fixture starting a JVM or a server is refused at collection,
naming the marker it lacks: without this, it would start Java on a contributor's machine in
a tier that promises not to (``make test-unit`` also points JAVA_HOME nowhere, so that a
SparkSession started some other way fails there instead of passing slowly).
"""

from __future__ import annotations

import pytest

# Fixtures of tests/conftest.py that start a JVM or a server, with the marker a test using
# them must carry.
FIXTURE_NEEDS = {
    "spark": "spark",
    "postgres": "jdbc",
    "airflow_db": "airflow",
    "spark_cluster": "cluster",
    "s3_server": "objectstore",
    "azure_server": "objectstore",
    "gcs_server": "objectstore",
    "kafka_broker": "kafka",
    "mini_yarn": "yarn",
}


def needs_markers(config: pytest.Config) -> frozenset[str]:
    """The markers of the "needs" list, as registered in pyproject.toml.

    :param config: the pytest configuration that holds the ``markers`` ini value.
    :return: the names of the markers whose description starts with ``needs``.
    """
    names = set()
    for line in config.getini("markers"):
        name, _, description = line.partition(":")
        if description.strip().startswith("needs "):
            names.add(name.split("(")[0].strip())
    return frozenset(names)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: `-m unit` must see the marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test without a needs marker ``unit``; refuse one that starts a JVM or server.

    :param config: the pytest configuration.
    :param items: the collected tests.
    """
    needs = needs_markers(config)
    for marker in FIXTURE_NEEDS.values():
        if marker not in needs:
            raise pytest.UsageError(f"pyproject.toml: the {marker!r} marker is not in the needs list")
    wrong = []
    for item in items:
        if any(item.get_closest_marker(name) for name in needs):
            continue
        # A parameter of the same name (test_jars's `spark` release string) is not the fixture.
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        fixtures = [name for name in getattr(item, "fixturenames", ()) if name not in params]
        wrong += [
            f"{item.nodeid} uses the {fixture!r} fixture without the {marker!r} marker"
            for fixture, marker in FIXTURE_NEEDS.items()
            if fixture in fixtures
        ]
        item.add_marker(pytest.mark.unit)
    if wrong:
        raise pytest.UsageError("tests in the unit tier that start a JVM or a server:\n" + "\n".join(wrong))
