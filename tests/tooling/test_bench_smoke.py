"""The benchmark runs: every area of ``benchmarks.run`` at toy sizes (``--smoke``), in its
own process, as ``make bench`` would run it.

Before issue 18 (item 21) nothing ran the benchmark, and ``make bench QUICK=1`` crashed in
its load area (``AttributeError: type object 'LandingFilesSource' has no attribute 'read'``:
the reader had moved to ``airflow_eod/spark/readers.py``). No timing is asserted here: only
that every area runs, produces its rows, and that the loads it measures hold their rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.support.postgres_server import JDBC_JAR, _bindir

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

pytestmark = [pytest.mark.bench, pytest.mark.spark, pytest.mark.slow]


def _smoke_rows(work: str, *extra: str) -> list[dict[str, Any]]:
    """Run ``benchmarks.run --smoke`` into ``work``; the rows of its JSON."""
    env = {**os.environ, "PYTHONPATH": REPO, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("EOD_FAULTPOINTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--work", work, *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, f"the smoke run failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    with open(os.path.join(work, "smoke.json")) as fh:
        rows: list[dict[str, Any]] = json.load(fh)["rows"]
    return rows


RESULTS = os.path.join(REPO, "benchmarks", "results")


def _mtimes() -> dict[str, int]:
    return {n: os.stat(os.path.join(RESULTS, n)).st_mtime_ns for n in os.listdir(RESULTS)}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """One ``benchmarks.run --smoke`` of every area for the whole module, and the committed
    results' mtimes taken before it. The engines and merge areas of this run are the ones
    ``--only engines`` / ``--only merge`` would run (same Settings.smoke, same Delta Spark
    jars), so their tests read its rows instead of starting a second and third JVM run of
    the same areas (CI time: about 65 s)."""
    before = _mtimes()
    return _smoke_rows(os.path.join(str(tmp_path_factory.mktemp("smoke")), "bench")), before


def test_every_benchmark_area_runs(smoke: tuple[list[dict[str, Any]], dict[str, int]]) -> None:
    """``python -m benchmarks.run --smoke``: exit 0, no area crashed, each area's rows there
    (the peer area with both its cases), and the run wrote its JSON into the work directory
    only, not over the committed results."""
    postgres = _bindir() is not None and os.path.exists(JDBC_JAR)
    if not postgres and os.environ.get("EOD_REQUIRE_POSTGRES"):
        pytest.fail("PostgreSQL binaries or its JDBC jar are missing (the history area's jdbc figures)")
    rows, before = smoke
    errors = [r for r in rows if r["status"] == "ERROR"]
    if not postgres:  # without the binaries only the jdbc history cannot run, and says why
        errors = [r for r in errors if "jdbc" not in r["figure"]]
    assert errors == [], errors
    areas = {r["area"] for r in rows}
    want = {"ask", "commit", "planning", "state", "load", "peer", "engines", "merge", "objectstore", "kafka"}
    assert want <= areas, areas
    _check_kafka_rows(rows)
    peer = [r["figure"] for r in rows if r["area"] == "peer"]
    for case in ("one file", "partitioned"):
        assert any(f.startswith(f"{case}:") and "airflow-eod, total" in f for f in peer), peer
    assert all(r["value"] is not None for r in rows if r["area"] in ("load", "peer")), rows
    assert _mtimes() == before, "a smoke run must not overwrite benchmarks/results"


@pytest.mark.delta_spark
def test_the_engines_area_loads_with_both_engines_beside_a_plain_delta_write(
    smoke: tuple[list[dict[str, Any]], dict[str, int]],
) -> None:
    """The engines area of the smoke run, with the Delta Spark jars: the plain Spark
    Delta write, the delta-spark load and the delta-rs load each measured (the area checks
    that every load committed its rows and every table holds all it was given, or it
    crashes), the two loads as ratios against the plain write."""
    rows = smoke[0]
    engines = [r for r in rows if r["area"] == "engines"]
    assert [r for r in engines if r["status"] == "ERROR"] == [], engines
    figures = [r["figure"] for r in engines]
    assert any("plain Spark Delta write" in f for f in figures), figures
    for engine in ("delta-spark", "delta-rs"):
        (mine,) = [r for r in engines if f"{engine} engine" in r["figure"]]
        assert mine["value"] is not None and mine["value"] > 0, mine
        assert mine["ratio"] is not None and mine["ratio"] > 0, mine
        assert "plain Delta write" in mine["note"], mine


@pytest.mark.delta_spark
def test_the_merge_area_merges_with_airflow_eod_beside_a_delta_spark_merge(
    smoke: tuple[list[dict[str, Any]], dict[str, int]],
) -> None:
    """The merge area of the smoke run, with the Delta Spark jars: for each change batch
    the airflow-eod merge load and Delta Spark's MERGE are measured side by side, as ratios,
    and both tables equal the reference (the area crashes if they do not), with the files and
    rows each rewrote."""
    from benchmarks.merge import CASES

    rows = smoke[0]
    merge = [r for r in rows if r["area"] == "merge"]
    assert [r for r in merge if r["status"] == "ERROR"] == [], merge
    for case in CASES:
        mine = {r["figure"].split("): ", 1)[1]: r for r in merge if f", {case.name} (" in r["figure"]}
        eod = mine["airflow-eod merge load (delta-rs engine), wall"]
        assert eod["value"] > 0 and eod["ratio"] is not None and eod["ratio"] > 0, eod
        assert mine["both tables equal the reference"]["value"] > 0, mine
        for figure in ("files rewritten (removed)", "rows written"):
            ours, theirs = mine[f"{figure}, airflow-eod"], mine[f"{figure}, Delta Spark MERGE"]
            assert ours["value"] > 0 and theirs["value"] > 0, (ours, theirs)


def _check_kafka_rows(rows: list[dict[str, Any]]) -> None:
    """The kafka area (benchmarks/kafka.py) measured both sides of every increment and the
    totals, as ratios; it checks itself that both tables hold what Kafka holds (or crashes).
    Without its prerequisites it prints one row saying why, which EOD_REQUIRE_KAFKA refuses."""
    kafka = [r for r in rows if r["area"] == "kafka"]
    if len(kafka) == 1 and kafka[0]["value"] is None:
        assert not os.environ.get("EOD_REQUIRE_KAFKA"), kafka[0]["note"]
        return
    eod = [r for r in kafka if "airflow-eod KafkaSource" in r["figure"]]
    stream = [r for r in kafka if "Structured Streaming availableNow" in r["figure"]]
    assert len(eod) == len(stream) >= 2, kafka  # every increment, and the total
    assert all(r["value"] > 0 and r["ratio"] is not None and r["ratio"] > 0 for r in eod), eod
    assert all(r["value"] > 0 for r in stream), stream
    (held,) = [r for r in kafka if "both tables equal what Kafka holds" in r["figure"]]
    assert held["value"] > 0, held
