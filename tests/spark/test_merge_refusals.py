"""A merge load's ``delete_when`` that cannot work is refused before anything is merged: an
error that names the batch and the expression, which the task does not retry, and the
table unchanged (issue 22)."""

from __future__ import annotations

from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.errors import BatchRefusedError
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, cdc_source, check_merge, write_changes

pytestmark = [pytest.mark.merge, pytest.mark.badinput, pytest.mark.spark]


@pytest.mark.parametrize(
    ("delete_when", "tombstones", "says"),
    [
        ("opp = 'D'", True, "delete_when \"opp = 'D'\" cannot be evaluated on the batch's columns"),
        ("opp = 'D'", False, "delete_when \"opp = 'D'\" cannot be evaluated on the batch's columns"),
        ("amount", True, "delete_when 'amount' is a bigint, not a condition"),
    ],
)
def test_a_delete_when_that_is_no_condition_on_the_batch_is_refused(
    spark: Any, tmp_path: Any, table: str, delete_when: str, tombstones: bool, says: str
) -> None:
    """With tombstones kept (the default) the merge never evaluates ``delete_when``: such a
    batch was committed, and the readers' filter ``NOT (<delete_when>)`` failed or lied
    later. Without tombstones Spark's analysis error came from inside the merge, and the task
    retried it as if it could pass; a number was cast to boolean (every amount but 0 a delete)."""
    landing = str(tmp_path / "landing")
    first = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 6)]
    write_changes(landing, "c-0001.csv", first)
    source = cdc_source(landing)
    plan = plan_for(source, table, "run-1", pipeline="tests.merge_refusals")
    assert run_load(spark, spec_for(source, table, plan, **MERGE_SETTINGS)).outcome == "committed"
    write_changes(landing, "c-0002.csv", [(2, "u2", 0, 2, "U"), (3, "n3", 30, 2, "D")])
    plan2 = plan_for(source, table, "run-2", pipeline="tests.merge_refusals")
    with pytest.raises(BatchRefusedError, match="nothing was committed") as err:
        settings = {**MERGE_SETTINGS, "delete_when": delete_when, "keep_tombstones": tombstones}
        run_load(spark, spec_for(source, table, plan2, **settings))
    assert says in str(err.value) and plan2.key.label in str(err.value)
    assert not err.value.retryable
    assert DeltaTable(table).version() == 0
    assert check_merge(table, first).ok
