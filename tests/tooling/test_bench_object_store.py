"""The pure parts of the benchmark's object-store area (no server, no Spark): the flatness
verdict, the request breakdown, the rows printed from what was measured, the rotation of the
load contenders and the builder's stand-in listing."""

from __future__ import annotations

from benchmarks.common import AREAS, Settings
from benchmarks.object_store import (
    FLAT_TOLERANCE,
    Checkpoint,
    Sample,
    breakdown,
    flatness,
    grown,
    listing_note,
    rows_of,
)
from benchmarks.store_history import _Arrived, landing_name
from benchmarks.store_load import contenders, rotation


def test_flatness_compares_the_largest_history_with_the_first() -> None:
    ratio, words = flatness({1_000: 20.0, 100: 20.0, 10_000: 22.0})
    assert ratio == 1.1 and words == "flat: 20 @100 -> 20 @1,000 -> 22 @10,000"
    ratio, words = flatness({100: 20.0, 10_000: 40.0})
    assert ratio == 2.0 and words.startswith("grows:")
    assert flatness({100: 20.0, 10_000: 20.0 * FLAT_TOLERANCE})[1].startswith("flat")
    assert flatness({100: 0.0, 1_000: 0.0}) == (1.0, "flat: 0 @100 -> 0 @1,000")
    assert flatness({100: 0.0, 1_000: 3.0})[0] is None
    assert flatness({100: 5.0}) == (None, "one checkpoint: nothing to compare")


def test_breakdown_is_the_mean_per_operation_largest_first() -> None:
    samples = [
        Sample(0.1, {"GetObject": 3, "HeadObject": 1}),
        Sample(0.2, {"GetObject": 5, "ListObjectsV2": 1}),
    ]
    assert breakdown(samples) == "GetObject 4.0, HeadObject 0.5, ListObjectsV2 0.5"
    assert samples[0].total == 4


def test_grown_names_the_operations_that_grew_even_under_a_flat_total() -> None:
    first = [
        Sample(0.1, {"GetObject": 60, "ListObjectsV2": 9}),
        Sample(0.1, {"GetObject": 60, "ListObjectsV2": 9}),
    ]
    last = [
        Sample(0.1, {"GetObject": 58, "ListObjectsV2": 27, "DeleteObjects": 1}),
        Sample(0.1, {"GetObject": 58}),
    ]
    assert grown(first, last) == "DeleteObjects 0.0 -> 0.5, ListObjectsV2 9.0 -> 13.5"
    assert grown(first, first) == ""


def test_the_landing_listing_is_shown_as_counted_and_as_s3_pages() -> None:
    assert listing_note(10_000).startswith("the landing listing of 10,000+ files is 10 ListObjectsV2")
    assert "files is 1 ListObjectsV2" in listing_note(5)


def _checkpoint(n: int, ask_requests: int, answered: int | None = None) -> Checkpoint:
    cp = Checkpoint(n, answered=n if answered is None else answered)
    cp.samples["ask, oldest batch"] = [Sample(0.01, {"GetObject": ask_requests})] * 3
    cp.samples["commit"] = [Sample(0.02, {"PutObject(If-None-Match)": 2})] * 3
    cp.checkpoint_commits = [Sample(0.2, {"GetObject": 9})]
    return cp


def test_rows_give_ratios_against_the_first_checkpoint_and_a_flatness_verdict() -> None:
    rows = {r.figure: r for r in rows_of([_checkpoint(100, 10), _checkpoint(1_000, 30, answered=999)])}
    assert rows["history of 100 batches: every batch asked on the store"].status == "PASS"
    assert rows["history of 1,000 batches: every batch asked on the store"].status == "MISS"
    later = rows["ask, oldest batch: requests, p50, 1,000 batches"]
    assert (later.value, later.ratio, later.unit) == (30, 3.0, "requests")
    assert "GetObject 30.0" in later.note
    grew = rows["ask, oldest batch: requests flat from the first to the largest history"]
    assert (
        grew.status == "MISS"
        and grew.note == "grows: 10 @100 -> 30 @1,000; growing part: GetObject 10.0 -> 30.0"
    )
    assert rows["commit: requests flat from the first to the largest history"].status == "PASS"
    assert rows["commit that also writes the Delta checkpoint, 1,000 batches"].value == 200.0
    # An operation nobody measured gives no verdict.
    assert rows["planning (freeze): requests flat from the first to the largest history"].value is None


def test_every_round_of_the_load_starts_with_the_next_contender() -> None:
    assert contenders(False) == ["parquet", "eod"]
    assert rotation(contenders(True), 4) == [
        ["parquet", "delta", "eod"],
        ["delta", "eod", "parquet"],
        ["eod", "parquet", "delta"],
        ["parquet", "delta", "eod"],
    ]


def test_the_builders_listing_returns_the_newest_arrived_file_not_loaded_yet() -> None:
    source = _Arrived(path="s3://b/land", file_format="csv")
    entries = [{"path": f"s3://b/land/{landing_name(i)}", "size": 6, "etag": f"e{i}"} for i in range(3)]
    source.arrived.extend(entries)
    assert source.list_files(skip={entries[1]["path"]}) == [entries[2]]
    assert source.identity()["path"] == "s3://b/land"  # the store's source, not a local one


def test_the_area_is_in_every_mode_with_its_sizes() -> None:
    assert "objectstore" in AREAS
    assert Settings.full().store_checkpoints == [100, 1_000, 10_000]
    assert Settings.quick().store_checkpoints == [100, 1_000]
    assert len(Settings.smoke().store_checkpoints) == 2
