"""A driver the cluster starts again (YARN's application re-attempts) loads as an attempt of
its own, whose commit the submitting task still knows for its own (issue 24)."""

from __future__ import annotations

import pytest

from airflow_eod.core.attempt import rerun_attempt_id, same_attempt
from airflow_eod.core.table_layout import path_part


def test_the_first_run_keeps_the_spec_id_and_later_runs_get_their_own() -> None:
    assert rerun_attempt_id("0123abcd", 1) == "0123abcd"
    second = rerun_attempt_id("0123abcd", 2)
    assert second != "0123abcd" and path_part(second, "attempt id") == second
    assert rerun_attempt_id("0123abcd", 3) not in ("0123abcd", second)


@pytest.mark.parametrize(
    ("committed", "ours"),
    [
        ("0123abcd", True),
        ("0123abcd.r2", True),
        ("0123abcd.r17", True),
        (None, False),
        ("ffff0000", False),
        ("0123abcd.r", False),
        ("0123abcd.rx", False),
        ("0123abc", False),
        ("0123abcd.r2.r3", False),
        ("x0123abcd.r2", False),
    ],
)
def test_a_commit_is_ours_only_if_it_is_this_attempt_or_its_rerun(committed: str | None, ours: bool) -> None:
    assert same_attempt(committed, "0123abcd") is ours
