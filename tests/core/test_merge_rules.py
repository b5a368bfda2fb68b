"""The merge rules as the operators check them, and the file pruning and conflict rules of
a merge commit (no JVM)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pytest

from airflow_eod.core.errors import BatchRefusedError, ConfigurationError
from airflow_eod.core.merge_files import KeyProbe, MergeBase, conflict, file_id, refuse_deletion_vectors
from airflow_eod.core.merge_rules import MergeRules, merge_rules


def test_an_append_takes_no_merge_settings_and_a_merge_needs_keys_and_an_order() -> None:
    assert merge_rules("append", None, None) is None
    with pytest.raises(ConfigurationError, match="write_mode is 'append'"):
        merge_rules("append", ["id"], None)
    with pytest.raises(ConfigurationError, match="needs order_by"):
        merge_rules("merge", ["id"], None)
    with pytest.raises(ConfigurationError, match="needs merge_keys"):
        merge_rules("merge", [], "seq")
    with pytest.raises(ConfigurationError, match="write_mode must be one of"):
        merge_rules("upsert", ["id"], "seq")
    rules = merge_rules("merge", "id", "seq", "op = 'D'")
    assert rules == MergeRules(keys=("id",), order_by="seq", delete_when="op = 'D'")
    assert MergeRules.from_dict(rules.to_dict()) == rules  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "keys,order",
    [(["id", "id"], "seq"), (["id"], "id"), (["a b"], "seq"), (["_eod_rank"], "seq"), (["id"], "x;drop")],
)
def test_merge_columns_are_plain_distinct_names(keys: list[str], order: str) -> None:
    with pytest.raises(ConfigurationError):
        merge_rules("merge", keys, order)


def test_manifest_rules_that_are_not_rules_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="not merge rules"):
        MergeRules.from_dict({"keys": ["../x"], "order_by": "seq"})


def _file(path: str, lo: Any, hi: Any, **kw: Any) -> dict[str, Any]:
    return {
        "log_path": path,
        "path": path,
        "size_bytes": 10,
        "modification_time": 1,
        "num_records": 5,
        "min": {"id": lo},
        "max": {"id": hi},
        "null_count": {"id": 0},
        "partition_values": {},
        **kw,
    }


def test_a_file_may_hold_a_key_only_when_a_batch_key_falls_in_its_range() -> None:
    probe = KeyProbe.of("id", [50, 10, 30, 10])
    assert probe.values == [10, 30, 50]
    assert probe.may_hold(_file("a", 1, 10))
    assert probe.may_hold(_file("b", 25, 35))
    assert not probe.may_hold(_file("c", 11, 29))
    assert not probe.may_hold(_file("d", 51, 99))
    # No statistics: the file may hold anything.
    assert probe.may_hold(_file("e", None, None))
    # A key that is a partition column: its files carry no statistics of it.
    assert probe.may_hold(_file("f", None, None, partition_values={"id": 7}))
    # An empty batch holds no key.
    assert not KeyProbe.of("id", []).may_hold(_file("g", 1, 99))


def test_a_truncated_string_maximum_still_admits_the_keys_that_start_with_it() -> None:
    probe = KeyProbe.of("id", ["customer-00099-long-suffix"])
    assert probe.may_hold(_file("a", "customer-00000", "customer-00099"))
    assert not KeyProbe.of("id", ["customer-00100"]).may_hold(_file("a", "customer-00000", "customer-00099"))


def test_timestamps_within_the_statistics_precision_are_held_and_odd_types_prune_nothing() -> None:
    ts = datetime(2026, 1, 1, 0, 0, 0, 400)
    probe = KeyProbe(column="id", values=[ts])
    assert probe.may_hold(_file("a", datetime(2025, 1, 1), datetime(2026, 1, 1)))  # max truncated to ms
    assert KeyProbe.of("id", [1.5, 2.5]).values is None  # floats: no pruning
    assert KeyProbe.of("id", [date(2026, 1, 1)]).values == [date(2026, 1, 1)]
    # A statistic that does not compare with the keys: the file may hold them.
    assert KeyProbe.of("id", [1, 2]).may_hold(_file("a", "x", "y"))


def test_the_commit_is_refused_when_another_writer_touched_what_the_merge_read() -> None:
    a, b, c = _file("a", 1, 10), _file("b", 11, 20), _file("c", 21, 30)
    probe = KeyProbe.of("id", [5, 15])
    base = MergeBase(3, {file_id(f) for f in (a, b, c)}, [a, b], probe)
    assert [r.path for r in base.removes] == ["a", "b"]
    assert conflict(base, [a, b, c]) is None
    # Unrelated: a file outside the batch's keys was added, c compacted away.
    assert conflict(base, [a, b, _file("d", 40, 50)]) is None
    # A rewritten file is gone (OPTIMIZE), or got a deletion vector.
    assert "removed or changed" in (conflict(base, [b, c]) or "")
    assert "removed or changed" in (conflict(base, [dict(a, deleted_rows=2), b, c]) or "")
    # A file that may hold a batch key was added (another writer's append).
    assert "may hold keys" in (conflict(base, [a, b, c, _file("e", 14, 16)]) or "")
    # The table was dropped, or created by another writer after a read of no table.
    assert conflict(base, None) == "the table is gone"
    assert "created the table" in (conflict(MergeBase(None, set(), [], probe), [a]) or "")


def test_files_with_deletion_vectors_are_refused_by_the_feature_name() -> None:
    refuse_deletion_vectors([_file("a", 1, 2)], "p/k")
    with pytest.raises(BatchRefusedError, match="deletionVectors"):
        refuse_deletion_vectors([_file("a", 1, 2, deleted_rows=1)], "p/k")
