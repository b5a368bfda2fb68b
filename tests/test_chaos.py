"""The chaos tier: generated histories of loads, input changes, backfills, restatements,
zombies, SIGKILLs and another writer's maintenance, each checked row by row at the end
(tests/chaos/, docs/testing.md).

CI runs a few trials; ``EOD_CHAOS_TRIALS`` raises the count, ``EOD_CHAOS_SEED`` picks the
histories, ``EOD_CHAOS_SHRINK=1`` lets Hypothesis shrink a failing one. Long runs:
``python -m benchmarks.chaos --trials 500``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.chaos.machine import SPARK
from tests.chaos.report import REPORT
from tests.chaos.run import run_trials

pytestmark = [pytest.mark.chaos, pytest.mark.spark, pytest.mark.faults]


@pytest.fixture
def chaos_postgres(request: pytest.FixtureRequest) -> Any:
    """The session's PostgreSQL server for the JDBC pipeline, or ``None`` where there is none
    (CI requires one, so there the JDBC pipeline always runs)."""
    try:
        return request.getfixturevalue("postgres")
    except pytest.skip.Exception:
        return None


def test_generated_histories_load_every_row_exactly_once(
    spark: Any, chaos_postgres: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trials = int(os.environ.get("EOD_CHAOS_TRIALS", "6"))
    base_seed = int(os.environ.get("EOD_CHAOS_SEED", "20261124"))
    # Half of CI's trials get a SIGKILL (a JVM each); long runs set their own share.
    monkeypatch.setenv("EOD_CHAOS_KILL_PERCENT", os.environ.get("EOD_CHAOS_KILL_PERCENT", "50"))
    monkeypatch.setitem(SPARK, "postgres", chaos_postgres)
    # The machine arms and disarms EOD_FAULTPOINTS itself, step by step and from its worker
    # threads (tests/chaos/machine.py; benchmarks/chaos.py runs it outside pytest too), so it
    # sets os.environ directly; registering the variable here undoes whatever it left.
    monkeypatch.delenv("EOD_FAULTPOINTS", raising=False)
    REPORT.__init__()  # type: ignore[misc]
    lines: list[str] = []
    report = run_trials(
        spark,
        trials=trials,
        base_seed=base_seed,
        per_chunk=trials,
        steps=12,
        shrink=os.environ.get("EOD_CHAOS_SHRINK") == "1",
        say=lines.append,
    )
    with capsys.disabled():
        print()
        print("\n".join(lines + report.lines()))
    assert report.trials >= trials
    assert sum(report.outcomes.values()) > 0, "the trials loaded nothing: the harness is broken"
    assert report.failures == 0 and not report.failing_seeds, "\n".join(lines + report.lines())
