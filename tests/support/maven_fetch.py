"""Jars for the test servers that run from Maven Central (the Kafka broker, Hadoop's mini
cluster): ``mvn dependency:copy-dependencies`` over a small pom, once, into
``~/.cache/airflow-eod/<name>/lib``. A second run fetches nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from typing import NoReturn

CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "airflow-eod"
)


def maven_jars(name: str, pom: str, last_jar: str, *, what: str, missing: Callable[[str], NoReturn]) -> str:
    """The folder of the jars ``pom`` depends on, fetched the first time.

    :param name: the cache folder's name (say, ``kafka-broker-4.1.1``).
    :param pom: the pom's text; its dependencies (and theirs) are the jars.
    :param last_jar: a jar of the fetch whose presence says the folder is complete (one from
        the pom's last dependency: an older pom's folder lacks it and is fetched again).
    :param what: what the jars are, for the error messages ("the Kafka broker's jars").
    :param missing: called with the reason when Maven is not installed (it skips the tier,
        or fails it where the tier is required).
    :raises RuntimeError: when Maven fails (its output's tail in the message).
    """
    folder = os.path.join(CACHE, name)
    lib = os.path.join(folder, "lib")
    if os.path.exists(os.path.join(lib, last_jar)):
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        missing(f"Maven (mvn) is missing: it fetches {what} (apt-get install maven)")
    os.makedirs(folder, exist_ok=True)
    work = tempfile.mkdtemp(prefix="fetch-", dir=folder)
    try:
        with open(os.path.join(work, "pom.xml"), "w") as fh:
            fh.write(pom)
        out = subprocess.run(
            [mvn, "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={work}/lib"],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"mvn could not fetch {what}: {(out.stdout + out.stderr)[-2000:]}")
        # Renamed into place whole: a fetch killed halfway leaves no folder that looks done
        # (one an older pom left is replaced; one a concurrent fetch just finished is kept).
        if not os.path.exists(os.path.join(lib, last_jar)):
            shutil.rmtree(lib, ignore_errors=True)
            os.rename(os.path.join(work, "lib"), lib)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return lib
