"""``make dist`` builds a wheel and an sdist that install cleanly (issue 18, item 19).

Before issue 18 the README said ``pip install airflow-eod``, which fails (the package is not
published), there was no ``make dist``, and a build would have shipped an sdist with the
test files but not their helpers, and neither the docs nor the example DAGs.

``make dist-check`` (run by ``.ci/run``) builds with ``python -m build`` in a throwaway venv
(the sdist first, then the wheel *from the sdist*, so the wheel proves the sdist builds) and
runs this module with ``EOD_DIST_DIR`` pointing at the result. Without it the tests skip.

The install check: a fresh venv whose only packages are the wheel (``pip install --no-deps
--no-index``) and, after them on ``sys.path``, the project venv's site-packages (a path
line, so the project's editable finder there stays off). A fresh install with dependencies
resolves and downloads Airflow and Spark for minutes; this way the check takes seconds and
needs no network, and what a full install adds is checked on the metadata: the wheel's
requirements are pyproject's, and ``pip check`` finds them all satisfied by versions the
test suite ran against.
"""

from __future__ import annotations

import email
import glob
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from typing import Any

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.dist

with open(os.path.join(REPO, "pyproject.toml"), "rb") as _fh:
    PROJECT: dict[str, Any] = tomllib.load(_fh)["project"]
VERSION = PROJECT["version"]
STEM = f"airflow_eod-{VERSION}"
# What the sdist holds: what rebuilds the wheel, the docs, and the example DAGs they refer to.
# (hatchling always adds .gitignore: the wheel built from the sdist excludes by it too).
SDIST_TOP = {"PKG-INFO", "pyproject.toml", "README.md", ".gitignore", "airflow_eod", "dags", "docs"}


def _tracked(*folders: str) -> set[str]:
    """The checkout's files under ``folders``: what git tracks, or without git (the compose
    `test` service's image has none) every file but Python's caches."""
    try:
        out = subprocess.run(
            ["git", "-C", REPO, "ls-files", "--", *folders], capture_output=True, text=True, check=True
        ).stdout
        return {line for line in out.splitlines() if line}
    except (OSError, subprocess.CalledProcessError):
        found = set()
        for folder in folders:
            for dirpath, dirs, names in os.walk(os.path.join(REPO, folder)):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                found |= {
                    os.path.relpath(os.path.join(dirpath, n), REPO) for n in names if not n.endswith(".pyc")
                }
        return found


@pytest.fixture(scope="module")
def dist_dir() -> str:
    where = os.environ.get("EOD_DIST_DIR")
    if not where:
        pytest.skip("needs a build: `make dist-check` builds one and runs these tests (.ci/run does)")
    return os.path.abspath(where)


@pytest.fixture(scope="module")
def wheel(dist_dir: str) -> str:
    found = glob.glob(os.path.join(dist_dir, "*.whl"))
    assert [os.path.basename(p) for p in found] == [f"{STEM}-py3-none-any.whl"], found
    return found[0]


@pytest.fixture(scope="module")
def sdist(dist_dir: str) -> str:
    found = glob.glob(os.path.join(dist_dir, "*.tar.gz"))
    assert [os.path.basename(p) for p in found] == [f"{STEM}.tar.gz"], found
    return found[0]


def _norm(requirement: str) -> tuple[str, frozenset[str], frozenset[str], str]:
    from packaging.requirements import Requirement

    r = Requirement(requirement)
    name = r.name.lower().replace("_", "-")
    return (name, frozenset(r.extras), frozenset(map(str, r.specifier)), str(r.marker))


def test_the_wheel_is_the_package_with_its_metadata(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = email.message_from_bytes(zf.read(f"{STEM}.dist-info/METADATA"))
        entry_points = zf.read(f"{STEM}.dist-info/entry_points.txt").decode()
    package = {n for n in names if not n.startswith(f"{STEM}.dist-info/")}
    # The sources and the PEP 561 marker, so that type checkers read the package's hints.
    sources = {p for p in _tracked("airflow_eod") if p.endswith(".py")} | {"airflow_eod/py.typed"}
    assert package == sources, package ^ sources
    assert meta["Name"] == "airflow-eod" and meta["Version"] == VERSION
    assert meta["Requires-Python"] == PROJECT["requires-python"]
    required = {_norm(r) for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r}
    assert required == {_norm(r) for r in PROJECT["dependencies"]}, required
    assert "[apache_airflow_provider]" in entry_points
    provider = r"^provider_info = airflow_eod\.get_provider_info:get_provider_info$"
    assert re.search(provider, entry_points, re.M)
    assert re.search(r"^airflow-eod = airflow_eod\.cli:main$", entry_points, re.M)


def test_the_sdist_holds_the_package_docs_and_example_dags(sdist: str) -> None:
    with tarfile.open(sdist) as tf:
        members = [m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile()]
    assert {m.split("/", 1)[0] for m in members} == SDIST_TOP, sorted({m.split("/", 1)[0] for m in members})
    files = set(members)
    for folder in ("airflow_eod", "dags", "docs"):
        shipped = {f for f in files if f.startswith(folder + "/")}
        assert shipped == _tracked(folder), (folder, shipped ^ _tracked(folder))
    assert "docs/CHANGELOG.md" in files
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)


def test_the_changelog_covers_this_version() -> None:
    """pyproject's version has its section in docs/CHANGELOG.md, and the README points there
    and says how to install what is not published."""
    with open(os.path.join(REPO, "docs", "CHANGELOG.md")) as fh:
        changelog = fh.read()
    assert re.search(rf"^## {re.escape(VERSION)}\b", changelog, re.M), "no section for " + VERSION
    with open(os.path.join(REPO, "README.md")) as fh:
        readme = fh.read()
    assert "docs/CHANGELOG.md" in readme
    assert "make dist" in readme
    assert not re.search(r"^\s*pip install airflow-eod(\s|$)", readme, re.M), "not on PyPI: it fails"


def test_the_wheel_installs_and_runs_in_a_fresh_venv(wheel: str, tmp_path: Any) -> None:
    venv = os.path.join(str(tmp_path), "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # After the venv's own packages: Airflow, Spark and the rest, as the project venv has them.
    with open(os.path.join(site, "zz_project_site.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    env = {"PATH": os.environ.get("PATH", ""), "AIRFLOW_HOME": os.path.join(str(tmp_path), "airflow-home")}
    pip = [sys.executable, "-m", "pip", "--python", py, "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--quiet", wheel], check=True, env=env)
    probe = f"""
import importlib.metadata as md, json, os, sys
import airflow_eod
site = {site!r}
assert airflow_eod.__file__.startswith(site), airflow_eod.__file__
dist = md.distribution("airflow-eod")
assert str(dist.locate_file("")).startswith(site) and dist.version == {VERSION!r}
(ep,) = [e for e in dist.entry_points if e.group == "apache_airflow_provider"]
info = ep.load()()
assert info["package-name"] == "airflow-eod", info
from airflow.providers_manager import ProvidersManager
providers = ProvidersManager().providers
assert "airflow-eod" in providers, sorted(providers)
print(json.dumps({{"file": airflow_eod.__file__, "provider": providers["airflow-eod"].version}}))
"""
    done = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert VERSION in done.stdout
    cli = subprocess.run(
        [os.path.join(venv, "bin", "airflow-eod"), "--help"], capture_output=True, text=True, env=env
    )
    assert cli.returncode == 0 and "usage: airflow-eod" in cli.stdout, cli.stdout + cli.stderr
    check = subprocess.run([*pip, "check"], capture_output=True, text=True, env=env)
    assert "airflow-eod" not in check.stdout, check.stdout
