"""Malformed records of a merge batch (issue 22, item 3): with ``quarantine_table_uri`` they go
to the quarantine table, as for appends, in the batch's commit's outbox, and the good rows
are merged; without one the batch fails and nothing is committed."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import MalformedInputError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, Change, cdc_source, check_merge, write_changes

pytestmark = [pytest.mark.merge, pytest.mark.badinput, pytest.mark.spark]

PIPE = "tests.merge_quarantine"
# Records that do not fit the CDC schema (id BIGINT, name STRING, amount BIGINT, seq BIGINT,
# op STRING): a key that is not a number, an ordering value that is not one, a short record.
MALFORMED = ["x1,bad key,1,5,U", "5,bad seq,50,five,U", "6,short"]


def _quarantined(quarantine: str) -> list[dict[str, Any]]:
    return pa.table(DeltaTable(quarantine).to_pyarrow_table()).to_pylist()


def test_malformed_records_of_a_merge_batch_are_quarantined_and_the_good_rows_merged(
    spark: Any, tmp_path: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing = str(tmp_path / "landing")
    quarantine = str(tmp_path / "quarantine")
    first: list[Change] = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 11)]
    write_changes(landing, "c-0001.csv", first)
    source = cdc_source(landing)
    plan1 = plan_for(source, table, "run-1", pipeline=PIPE)
    spec1 = spec_for(source, table, plan1, quarantine_table_uri=quarantine, **MERGE_SETTINGS)
    assert run_load(spark, spec1).outcome == "committed"
    assert not os.path.exists(quarantine), "a clean batch writes no quarantine"

    # The second batch: updates, a delete, an insert, and the malformed records among them.
    good: list[Change] = [(2, "u2", 200, 2, "U"), (3, "u3", 300, 2, "U"), (4, "n4", 40, 3, "D")]
    good += [(11, "n11", 110, 2, "I"), (2, "u2 again", 201, 3, "U")]
    path = write_changes(landing, "c-0002.csv", good)
    with open(path, "a") as fh:
        fh.write("\n".join(MALFORMED) + "\n")
    plan2 = plan_for(source, table, "run-2", pipeline=PIPE)
    before = DeltaTable(table).version()

    # Without a quarantine table the batch fails, naming the file and the count.
    with pytest.raises(MalformedInputError, match=r"3 malformed record\(s\).*c-0002\.csv: 3"):
        run_load(spark, spec_for(source, table, plan2, **MERGE_SETTINGS))
    assert DeltaTable(table).version() == before

    # With one: the attempt dies after staging; its retry merges the good rows and delivers
    # the malformed ones once.
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@2")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan2, 2, quarantine_table_uri=quarantine, **MERGE_SETTINGS))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert DeltaTable(table).version() == before
    result = run_load(
        spark, spec_for(source, table, plan2, 3, quarantine_table_uri=quarantine, **MERGE_SETTINGS)
    )
    assert (result.outcome, result.rows) == ("committed", 4), "4 keys: 2, 3, 4 and 11"
    got = check_merge(table, first + good)
    assert got.ok, got
    bad = _quarantined(quarantine)
    assert sorted(r["raw_record"] for r in bad) == sorted(MALFORMED)
    assert all(r["source_file"].endswith("c-0002.csv") for r in bad)
    assert ask(TableRef.parse(quarantine), plan2.key).committed

    # A retry of the committed batch writes nothing, in either table.
    versions = (DeltaTable(table).version(), DeltaTable(quarantine).version())
    again = run_load(
        spark, spec_for(source, table, plan2, 4, quarantine_table_uri=quarantine, **MERGE_SETTINGS)
    )
    assert again.outcome == "already_committed"
    assert (DeltaTable(table).version(), DeltaTable(quarantine).version()) == versions
    assert len(_quarantined(quarantine)) == len(MALFORMED)
    assert check_merge(table, first + good).ok
