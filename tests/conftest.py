"""Shared fixtures: one local SparkSession per test session, an isolated Airflow home,
and helpers that build real landing directories and real Delta tables."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

# Airflow reads its configuration at import time: point it at a throwaway home first.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="eod-airflow-home-")
os.environ.setdefault("AIRFLOW_HOME", _AIRFLOW_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", os.path.join(os.path.dirname(__file__), "..", "dags"))
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.pop("EOD_FAULTPOINTS", None)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from airflow_eod.spark.session import get_session

    session = get_session()
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata DB in the session's Airflow home."""
    subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture
def landing(tmp_path: Any) -> str:
    path = tmp_path / "landing"
    path.mkdir()
    return str(path)


@pytest.fixture
def table(tmp_path: Any) -> str:
    return str(tmp_path / "table")
