"""The Delta Spark jars that match a Spark release, fetched once from Maven into a cache.

``engine='delta-spark'`` (and every Delta Spark SQL statement) needs Delta's jars on the
Spark classpath. They are not on PyPI: the ``delta-spark`` wheel carries only the Python API.
Spark's own ``--packages`` resolver reaches Maven by its own route (Ivy), which proxies and
mirrors that serve ``mvn`` do not always serve, so the jars are fetched with ``mvn
dependency:copy`` into a cache folder, and the paths are handed to Spark (``spark.jars``, the
operator's ``jars=``, or ``EOD_DELTA_SPARK_JARS`` for the tests).

Run ``python -m airflow_eod.spark.jars`` to print the comma-separated paths (fetching what the
cache lacks), or ``--coordinates`` to print the Maven coordinates to put on a cluster.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

# Delta Spark release per Spark minor release: the newest Delta whose jars are on Maven
# Central for that Spark. Delta 4.4 publishes one artifact per Spark 4 minor release
# (delta-spark_4.2_2.13); Spark 3.5 is served by Delta 3.3 on Scala 2.12, pyspark's own build.
# The delta-spark wheel 4.4.1 has no jars on Maven Central (4.4.0 is the newest there), which
# is why the dev extra pins delta-spark==4.4.0: the Python API and the jars then agree.
DELTA_FOR_SPARK: dict[str, tuple[str, str]] = {
    "3.5": ("delta-spark_2.12", "3.3.2"),
    "4.0": ("delta-spark_4.0_2.13", "4.4.0"),
    "4.1": ("delta-spark_4.1_2.13", "4.4.0"),
    "4.2": ("delta-spark_4.2_2.13", "4.4.0"),
}
GROUP = "io.delta"
# Pinned so that every machine resolves the same plugin; `mvn dependency:copy` on the default
# plugin (2.8 on Maven 3.8) does not take -Dartifact.
_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
DEFAULT_CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "airflow-eod", "jars"
)


class JarFetchError(RuntimeError):
    """The jars could not be fetched; the message says why and what to do."""


@dataclass(frozen=True)
class Jar:
    """One Maven artifact, as a jar file in the cache.

    :param group: the Maven group id.
    :param artifact: the artifact id.
    :param version: the artifact's version.
    :param classifier: the artifact's classifier, such as ``shaded`` (none by default).
    """

    group: str
    artifact: str
    version: str
    classifier: str = ""

    @property
    def coordinate(self) -> str:
        if self.classifier:
            return f"{self.group}:{self.artifact}:{self.version}:jar:{self.classifier}"
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact}-{self.version}{suffix}.jar"


def spark_minor(version: str | None = None) -> str:
    """``major.minor`` of ``version``, or of the installed pyspark."""
    if version is None:
        version = metadata.version("pyspark")
    return ".".join(version.split(".")[:2])


def delta_spark_jars(spark_version: str | None = None) -> list[Jar]:
    """The jars Delta Spark needs beside Spark ``spark_version`` (default: the installed one).

    Delta Spark's other dependencies (Delta Kernel, Unity Catalog clients) are needed only by
    features this provider does not use; Spark itself ships the rest (ANTLR, Jackson).

    :raises JarFetchError: for a Spark release no Delta Spark release on Maven serves.
    """
    minor = spark_minor(spark_version)
    try:
        artifact, version = DELTA_FOR_SPARK[minor]
    except KeyError:
        known = ", ".join(sorted(DELTA_FOR_SPARK))
        raise JarFetchError(
            f"no Delta Spark release is known for Spark {minor} (known: {known}); pass the jars "
            "yourself (EOD_DELTA_SPARK_JARS, or the operator's jars=)"
        ) from None
    return [Jar(GROUP, artifact, version), Jar(GROUP, "delta-storage", version)]


def cached(jars: list[Jar], cache: str = DEFAULT_CACHE) -> list[str] | None:
    """The paths of ``jars`` if ``cache`` holds them all, else ``None``; fetches nothing."""
    paths = [os.path.join(cache, jar.file_name) for jar in jars]
    return paths if all(os.path.isfile(p) for p in paths) else None


def fetch(jars: list[Jar], cache: str = DEFAULT_CACHE, *, mvn: str | None = None) -> list[str]:
    """The paths of ``jars`` in ``cache``, fetching with Maven only those it lacks.

    Each jar is copied into a temporary folder beside the cache and renamed into place, so
    an interrupted fetch never leaves a truncated jar that a later run would take as cached.

    :param jars: the artifacts.
    :param cache: the cache folder (created if missing).
    :param mvn: the Maven executable (default: ``mvn`` on ``PATH``).
    :raises JarFetchError: when Maven is missing or cannot fetch an artifact.
    """
    os.makedirs(cache, exist_ok=True)
    paths = []
    for jar in jars:
        path = os.path.join(cache, jar.file_name)
        if not os.path.isfile(path):
            _fetch_one(jar, cache, path, mvn or shutil.which("mvn"))
        paths.append(path)
    return paths


def _fetch_one(jar: Jar, cache: str, path: str, mvn: str | None) -> None:
    if mvn is None:
        raise JarFetchError(
            f"Maven (mvn) is not installed, so {jar.coordinate} cannot be fetched; install "
            f"Maven (apt-get install maven) or put the jar at {path}"
        )
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        cmd = [
            mvn,
            "-q",
            "-B",
            f"{_DEPENDENCY_PLUGIN}:copy",
            f"-Dartifact={jar.coordinate}",
            f"-DoutputDirectory={tmp}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        got = os.path.join(tmp, jar.file_name)
        if done.returncode != 0 or not os.path.isfile(got):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            raise JarFetchError(f"Maven could not fetch {jar.coordinate} (exit {done.returncode}): {tail}")
        os.replace(got, path)


def jars_cli(
    argv: list[str] | None, *, prog: str, what: str, jars_for: Callable[[str | None], list[Jar]]
) -> int:
    """The command line of a module that prints a set of jars for a Spark release (fetching
    what the cache lacks), or their Maven coordinates.

    :param argv: the arguments (default: the process's).
    :param prog: the command, for its help.
    :param what: the jars' name, for the help and the error.
    :param jars_for: the jars for a Spark release (``None``: the installed pyspark).
    """
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"Print {what} for the installed (or a given) Spark, fetching what the "
        "cache lacks with Maven.",
    )
    parser.add_argument("--spark-version", help="a Spark release, e.g. 3.5.6 (default: installed pyspark)")
    parser.add_argument("--cache", default=DEFAULT_CACHE, help=f"the cache folder (default {DEFAULT_CACHE})")
    parser.add_argument(
        "--coordinates", action="store_true", help="print the Maven coordinates only; fetch nothing"
    )
    args = parser.parse_args(argv)
    try:
        jars = jars_for(args.spark_version)
        if args.coordinates:
            print(",".join(j.coordinate for j in jars))
        else:
            print(",".join(fetch(jars, args.cache)))
    except (JarFetchError, OSError, subprocess.SubprocessError) as exc:
        print(f"airflow-eod: {what} are not available: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    return jars_cli(
        argv, prog="python -m airflow_eod.spark.jars", what="the Delta Spark jars", jars_for=delta_spark_jars
    )


if __name__ == "__main__":
    sys.exit(main())
