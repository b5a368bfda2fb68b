"""Fault points are test-only (issue 18, item 7): ``EOD_FAULTPOINTS`` alone in a worker's
environment must not make a production task raise or SIGKILL itself."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from airflow_eod.core import faults
from airflow_eod.core.ask import ask
from airflow_eod.core.faults import InjectedFault, fault_point
from airflow_eod.examples.sample_data import write_order_files
from tests.support.helpers import check, orders_source, plan_for, run_child, spec_for

pytestmark = [pytest.mark.guarantee]


def test_an_armed_point_without_the_testing_switch_does_nothing_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(faults.TESTING_SWITCH, raising=False)
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise,before_commit=kill")
    monkeypatch.setattr(faults, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="airflow_eod.core.faults"):
        fault_point("after_commit", try_number=1)
        fault_point("before_commit", try_number=1)  # a kill would end this test process
        fault_point("after_commit", try_number=2)
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per setting, not once per point
    assert faults.TESTING_SWITCH in warnings[0]


@pytest.mark.parametrize("switch", ["0", "true", "yes", ""])
def test_only_the_exact_switch_value_arms_the_points(monkeypatch: pytest.MonkeyPatch, switch: str) -> None:
    monkeypatch.setenv(faults.TESTING_SWITCH, switch)
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise")
    fault_point("after_commit", try_number=1)  # does not raise


def test_with_both_switches_the_point_fires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise")
    with pytest.raises(InjectedFault):
        fault_point("after_commit", try_number=1)


@pytest.mark.spark
def test_a_production_driver_with_a_stray_kill_point_loads_its_batch(
    landing: str, table: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real load in its own process, ``before_commit=kill`` in its environment and no
    switch: it commits and exits 0 instead of killing itself."""
    write_order_files(landing, 2, 20)
    source = orders_source(landing)
    plan = plan_for(source, table)
    monkeypatch.delenv(faults.TESTING_SWITCH)  # the child copies this process's environment
    child = run_child(spec_for(source, table, plan, try_number=1), str(tmp_path), "before_commit=kill")
    out, _ = child.communicate(timeout=300)
    assert child.returncode == 0, out.decode()[-3000:]
    assert "is set but ignored" in out.decode()
    assert ask(table, plan.key).committed
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    assert cmp.table_rows == 40
