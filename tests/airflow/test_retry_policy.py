"""Failures that no retry can fix end a task at once; the others keep its retries.

The error classes say which they are (``EodError.retryable``), docs/reference.md lists them,
and a real Airflow run (``dag.test()``) shows a refused load ending on its first try while a
load whose input has not landed spends every retry.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from typing import Any

import pytest

from airflow_eod.core import errors
from tests.conftest import REPO
from tests.support.helpers import load_dag_file, task_tries

ENDS_AT_ONCE = {
    "ConfigurationError",
    "SchemaMismatchError",
    "MalformedInputError",
    "InputChangedError",
    "UnsafePathError",
    "RetentionWindowError",
    "UnsupportedTableError",
    "PlanLogError",
    "CorruptRecordError",
    "CorruptTableError",
    "BatchRefusedError",
    "OverlappingIntervalError",
    "NullKeyError",
    "ForeignMarkerError",
    "RecordsDeletedError",
    "TopicRecreatedError",
}


def _classes() -> dict[str, type[errors.EodError]]:
    return {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.EodError)
    }


def test_each_error_class_says_whether_a_retry_can_fix_it() -> None:
    got = {name for name, cls in _classes().items() if not cls.retryable}
    assert got == ENDS_AT_ONCE
    assert errors.BatchError.retryable and errors.EodError.retryable


def test_the_reference_lists_every_error_class_as_it_behaves() -> None:
    with open(os.path.join(REPO, "docs", "reference.md")) as fh:
        text = fh.read()
    section = text[text.index("### Errors that end a task at once") :]
    rows = dict(re.findall(r"^\| `(\w+)` \| (ends the task at once|retried) \|", section, re.M))
    assert set(rows) == set(_classes()), "every error class has a row"
    for name, cls in _classes().items():
        assert rows[name] == ("retried" if cls.retryable else "ends the task at once"), name


@pytest.mark.airflow
def test_a_refused_load_ends_on_its_first_try_and_a_missing_input_is_retried(
    airflow_db: str, tmp_path: Any, monkeypatch: Any, capfd: Any
) -> None:
    root = tmp_path / "retry"
    (root / "landing").mkdir(parents=True)
    (root / "not_a_table.csv").write_text("order_id\n1\n")
    (root / "someone_elses").mkdir()
    (root / "someone_elses" / "report.xlsx").write_text("theirs")
    monkeypatch.setenv("EOD_TEST_RETRY_ROOT", str(root))
    module = load_dag_file(os.path.join(REPO, "tests", "dags", "eod_retry_policy.py"))
    run = module.dag.test(logical_date=datetime(2026, 11, 20, tzinfo=UTC))
    logs = capfd.readouterr()
    assert str(run.state) == "failed"
    assert task_tries(run.run_id, "refused") == ["failed"], "a refusal must not spend retries"
    assert task_tries(run.run_id, "foreign_directory") == ["failed"]
    assert os.listdir(root / "someone_elses") == ["report.xlsx"], "nothing written into their directory"
    assert task_tries(run.run_id, "missing_input") == ["failed", "failed", "failed"]
    text = logs.out + logs.err
    assert "is a file, not a Delta table directory" in text
    assert "exists but is not a Delta table (it holds report.xlsx)" in text
    assert "no retry can fix this" in text
    assert "landing directory" in text and "does not exist" in text
    assert (root / "not_a_table.csv").read_text() == "order_id\n1\n", "the refusal changed nothing"
    assert not (root / "table").exists(), "a load with no input created no table"


@pytest.mark.airflow
def test_a_sensor_on_a_directory_that_is_no_table_fails_without_retries(tmp_path: Any) -> None:
    from airflow_eod.airflow_exceptions import AirflowFailException
    from airflow_eod.sensors.delta_batch import DeltaBatchSensor

    foreign = tmp_path / "someone_elses"
    foreign.mkdir()
    (foreign / "report.xlsx").write_text("theirs")
    sensor = DeltaBatchSensor(
        task_id="confirm",
        table_uri=str(foreign),
        pipeline_id="tests.retry.sensor",
        batch_key="i-20261120T000000Z-20261121T000000Z",
        retries=2,
    )
    with pytest.raises(AirflowFailException, match="is not a Delta table") as err:
        sensor.poke({})
    assert "tests.retry.sensor/i-20261120T000000Z-20261121T000000Z" in str(err.value)
