"""The Delta Spark jar fetcher (airflow_eod/spark/jars.py): coordinates per Spark release and
a cache that a second run takes without asking Maven.

Tests talk only to 127.0.0.1, so Maven itself is replaced here by a script that plays its part
(copies a jar into -DoutputDirectory and logs the call); the real fetch from Maven Central is
what `make test` runs before the tests (`make jars`), and CI fails if it did not work.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from airflow_eod.spark.jars import (
    JarFetchError,
    cached,
    delta_spark_jars,
    fetch,
    main,
)


def _fake_mvn(tmp_path: Path, *, fail: bool = False) -> tuple[str, Path]:
    """An executable that acts as `mvn dependency:copy` and logs each artifact asked for."""
    log = tmp_path / "mvn.log"
    script = tmp_path / "mvn"
    body = (
        "echo 'ERROR: Could not find artifact' >&2; exit 1"
        if fail
        else (
            'for a in "$@"; do case "$a" in -Dartifact=*) art="${a#-Dartifact=}";; '
            '-DoutputDirectory=*) out="${a#-DoutputDirectory=}";; esac; done\n'
            'echo "$art" >> ' + str(log) + "\n"
            'IFS=: read g a v t c <<< "$art"; echo jar > "$out/$a-$v${c:+-$c}.jar"'
        )
    )
    script.write_text("#!/usr/bin/env bash\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


@pytest.mark.parametrize(
    ("spark", "expected"),
    [
        ("4.2.0", ["io.delta:delta-spark_4.2_2.13:4.4.0", "io.delta:delta-storage:4.4.0"]),
        ("4.0.1", ["io.delta:delta-spark_4.0_2.13:4.4.0", "io.delta:delta-storage:4.4.0"]),
        ("3.5.6", ["io.delta:delta-spark_2.12:3.3.2", "io.delta:delta-storage:3.3.2"]),
    ],
)
def test_each_spark_release_gets_the_delta_release_built_for_it(spark: str, expected: list[str]) -> None:
    assert [j.coordinate for j in delta_spark_jars(spark)] == expected


def test_a_spark_release_no_delta_serves_is_refused_by_name() -> None:
    with pytest.raises(JarFetchError, match=r"Spark 3\.4 .*known: 3\.5, 4\.0"):
        delta_spark_jars("3.4.1")


def test_a_second_fetch_takes_the_cache_and_asks_maven_nothing(tmp_path: Path) -> None:
    mvn, log = _fake_mvn(tmp_path)
    cache = str(tmp_path / "cache")
    jars = delta_spark_jars("4.2.0")
    assert cached(jars, cache) is None
    first = fetch(jars, cache, mvn=mvn)
    assert [os.path.basename(p) for p in first] == [
        "delta-spark_4.2_2.13-4.4.0.jar",
        "delta-storage-4.4.0.jar",
    ]
    assert log.read_text().split() == [j.coordinate for j in jars]
    assert fetch(jars, cache, mvn=mvn) == first
    assert len(log.read_text().split()) == 2, "the second run asked Maven again"
    assert cached(jars, cache) == first
    # Nothing of the fetch's temporary folders is left in the cache.
    assert sorted(os.listdir(cache)) == sorted(os.path.basename(p) for p in first)


def test_a_failed_fetch_says_which_artifact_and_leaves_no_jar(tmp_path: Path) -> None:
    mvn, _ = _fake_mvn(tmp_path, fail=True)
    cache = str(tmp_path / "cache")
    with pytest.raises(
        JarFetchError, match=r"io\.delta:delta-spark_4\.2_2\.13:4\.4\.0 \(exit 1\).*Could not find"
    ):
        fetch(delta_spark_jars("4.2.0"), cache, mvn=mvn)
    assert os.listdir(cache) == []


def test_without_maven_the_error_says_how_to_get_the_jar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JarFetchError, match=r"Maven \(mvn\) is not installed.*apt-get install maven"):
        fetch(delta_spark_jars("4.2.0"), str(tmp_path / "cache"))


def test_the_command_prints_coordinates_for_a_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--coordinates", "--spark-version", "3.5.6"]) == 0
    assert capsys.readouterr().out.strip() == "io.delta:delta-spark_2.12:3.3.2,io.delta:delta-storage:3.3.2"
    assert main(["--coordinates", "--spark-version", "2.4.8"]) == 2
    assert "no Delta Spark release is known for Spark 2.4" in capsys.readouterr().err


def _collect_delta_spark_tier(tmp_path: Path, **env: str) -> tuple[int, str]:
    import subprocess
    import sys

    clean = {
        k: v for k, v in os.environ.items() if k not in ("EOD_DELTA_SPARK_JARS", "EOD_REQUIRE_DELTA_SPARK")
    }
    clean.update(XDG_CACHE_HOME=str(tmp_path / "empty-cache"), **env)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-rs",
            "tests/delta_spark/test_delta_spark_engine.py",
            "-k",
            "commits_once",
        ],
        capture_output=True,
        text=True,
        env=clean,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        timeout=600,
    )
    return done.returncode, done.stdout + done.stderr


def test_without_the_jars_the_tier_skips_saying_why_and_ci_fails_instead(tmp_path: Path) -> None:
    code, out = _collect_delta_spark_tier(tmp_path)
    assert code == 0 and "1 skipped" in out, out
    assert "the Delta Spark jars are not in" in out and "make test" in out, out
    code, out = _collect_delta_spark_tier(tmp_path, EOD_REQUIRE_DELTA_SPARK="1")
    assert code != 0, out
    # The whole file's tier is counted: -k deselects after the tier is checked.
    assert re.search(r"EOD_REQUIRE_DELTA_SPARK=1 but \d+ delta_spark tests cannot run", out), out
