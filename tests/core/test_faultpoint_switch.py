"""Fault points are test-only (issue 18, item 7): ``EOD_FAULTPOINTS`` alone in a worker's
environment must not make a production task raise or SIGKILL itself."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from airflow_eod.core import faults
from airflow_eod.core.ask import ask
from airflow_eod.core.attempt import attempt, current_try
from airflow_eod.core.faults import InjectedFault, fault_point
from airflow_eod.core.table_ref import TableRef
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
        fault_point("after_commit")
        fault_point("before_commit")  # a kill would end this test process
        fault_point("after_commit")
    warnings = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per setting, not once per point
    assert faults.TESTING_SWITCH in warnings[0]


@pytest.mark.parametrize("switch", ["0", "true", "yes", ""])
def test_only_the_exact_switch_value_arms_the_points(monkeypatch: pytest.MonkeyPatch, switch: str) -> None:
    monkeypatch.setenv(faults.TESTING_SWITCH, switch)
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise")
    fault_point("after_commit")  # does not raise


def test_with_both_switches_the_point_fires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise")
    with pytest.raises(InjectedFault):
        fault_point("after_commit")


def test_a_point_armed_for_one_try_fires_only_in_that_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The try comes from the attempt in progress (issue 20, item 5), not from a parameter:
    outside any attempt, and in another try, a point armed ``@2`` does nothing."""
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise@2")
    fault_point("after_commit")  # no attempt: no try
    with attempt(1):
        fault_point("after_commit")
        with attempt(2), pytest.raises(InjectedFault, match=r"try 2"):
            fault_point("after_commit")
        fault_point("after_commit")  # back in try 1 once try 2's block ended
    assert current_try() is None


def test_a_point_armed_once_fires_only_for_the_process_that_claims_its_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``^PATH``: the first process to reach the point creates PATH and fires; any process
    after it (YARN's next attempt of the same driver) goes on, as does this one again."""
    marker = tmp_path / "fired"
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, f"before_commit=raise@1^{marker}")
    with attempt(1):
        with pytest.raises(InjectedFault):
            fault_point("before_commit")
        assert marker.exists()
        fault_point("before_commit")  # the marker is there: no second fault
    marker.unlink()
    with attempt(2):
        fault_point("before_commit")  # armed for try 1 only: the marker is not even claimed
    assert not marker.exists()


def test_racing_attempts_in_one_process_each_see_their_own_try(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tries running side by side in threads (as racing attempts in a test, or a worker
    running two tries): the point armed for try 2 fires in try 2's thread only."""
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, "after_commit=raise@2")
    both_inside = threading.Barrier(2, timeout=30)
    fired: dict[int, bool] = {}

    def one_try(n: int) -> None:
        with attempt(n):
            both_inside.wait()  # both attempts are open at once
            try:
                fault_point("after_commit")
                fired[n] = False
            except InjectedFault:
                fired[n] = True

    threads = [threading.Thread(target=one_try, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert fired == {1: False, 2: True}


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
    assert ask(TableRef.parse(table), plan.key).committed
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    assert cmp.table_rows == 40


def test_meet_holds_each_racer_until_all_have_reached_the_point(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``meet:DIR:N`` (the racing tests' rendezvous, instead of a long sleep): a racer waits
    at the point until N have reached it, then all go on; a lone racer waits out the timeout
    and goes on (its test's race checks then fail, not hang)."""
    monkeypatch.setenv(faults.TESTING_SWITCH, "1")
    monkeypatch.setenv(faults.ENV_VAR, f"before_commit=meet:{tmp_path / 'meet'}:3")
    passed: list[int] = []

    def racer(n: int) -> None:
        fault_point("before_commit")
        passed.append(n)

    first = [threading.Thread(target=racer, args=(n,)) for n in (1, 2)]
    for t in first:
        t.start()
    for t in first:
        t.join(timeout=0.5)
    assert passed == [], passed  # two of three have come: both still wait
    last = threading.Thread(target=racer, args=(3,))
    last.start()
    for t in [*first, last]:
        t.join(timeout=10)
    assert sorted(passed) == [1, 2, 3]
    monkeypatch.setattr(faults, "MEET_TIMEOUT_S", 0.2)
    monkeypatch.setenv(faults.ENV_VAR, f"before_commit=meet:{tmp_path / 'alone'}:2")
    fault_point("before_commit")  # returns after the timeout
