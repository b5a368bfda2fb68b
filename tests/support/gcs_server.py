"""Start and stop a throwaway GCS emulator on 127.0.0.1 for the `objectstore` tests:
fake-gcs-server, built from its Go module, behind the XML upload front of
tests/support/gcs_xml_front.py.

Why this emulator (issue 21, item 5): its simple uploads honour ``ifGenerationMatch=0`` and
decide it under its backend's lock, so of 16 racers on one key one wins
(tests/core/test_gcs_storage.py races 20 rounds each run). The fake-gcs-server release on
PyPI ignores the precondition (issue 21 reports); v1.56.1, built from the Go module, answers
412 (tests/core/test_gcs_storage.py checks it through obstore).
obstore writes with the XML API, which fake-gcs-server lacks for uploads: the front rewrites
that one request (see its docstring) and passes everything else through.

The binary: ``EOD_FAKE_GCS`` names one; else the one ``go install`` put in
``~/.cache/airflow-eod/go/bin``; else, when Go is on PATH, it is built there (about two
minutes on 2 cores, the modules and the build cache kept beside it, so a second run builds
nothing); ``make gcs-emulator`` does the same ahead of time. Without Go the tests skip (with
EOD_REQUIRE_OBJECTSTORE=1 they fail). The emulator and the front run in sessions of their
own on free ports of 127.0.0.1, the emulator on its memory backend; the reaper
(tests/support/reaper.py) kills both and removes the directory if this process dies without
:meth:`GCSServer.stop`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.loopback import free_ports, log_tail, stop_processes
from tests.support.reaper import Reaper, watch

MODULE = "github.com/fsouza/fake-gcs-server"
VERSION = "v1.56.1"
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "airflow-eod", "go")
BUCKET = "eod"
READY_SECONDS = 30.0
BUILD_SECONDS = 900.0
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def cached_binary() -> str:
    return os.path.join(CACHE, "bin", "fake-gcs-server")


def build(go: str) -> str:
    """``go install`` fake-gcs-server at :data:`VERSION` into the cache; its path.

    :param go: the ``go`` command.
    :raises RuntimeError: when the build fails (its output in the message).
    """
    env = {
        **os.environ,
        "GOBIN": os.path.join(CACHE, "bin"),
        "GOMODCACHE": os.path.join(CACHE, "mod"),
        "GOCACHE": os.path.join(CACHE, "build"),
        "GOFLAGS": "-buildvcs=false -modcacherw",
    }
    done = subprocess.run(
        [go, "install", f"{MODULE}@{VERSION}"],
        env=env, capture_output=True, timeout=BUILD_SECONDS, check=False, cwd=CACHE,
    )  # fmt: skip
    if done.returncode != 0 or not os.access(cached_binary(), os.X_OK):
        raise RuntimeError(
            f"go install {MODULE}@{VERSION} failed: {done.stderr.decode(errors='replace')[-2000:]}"
        )
    return cached_binary()


def emulator_binary() -> str | None:
    """``EOD_FAKE_GCS``, else the cached build, else a new build when Go is there; ``None``
    when there is no binary and no Go to build one."""
    if os.environ.get("EOD_FAKE_GCS"):
        return os.environ["EOD_FAKE_GCS"]
    if os.access(cached_binary(), os.X_OK):
        return cached_binary()
    # The official Go tarball installs into /usr/local/go, often not on a service's PATH.
    go = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if go is None:
        return None
    os.makedirs(CACHE, exist_ok=True)
    return build(go)


@dataclass
class GCSServer:
    root: str
    port: int
    emulator_port: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    reaper: Reaper | None = None

    host = "127.0.0.1"
    bucket = BUCKET

    @property
    def endpoint(self) -> str:
        """Where clients go: the front, which passes all but XML uploads through."""
        return f"http://{self.host}:{self.port}"

    @property
    def service_account_path(self) -> str:
        return os.path.join(self.root, "service-account.json")

    def options(self) -> dict[str, str]:
        """Storage options for this server, named as delta-rs names them. The key file is the
        emulator form object_store reads (``gcs_base_url``, ``disable_oauth``): no token is
        fetched, the base URL is the front."""
        return {"GOOGLE_SERVICE_ACCOUNT": self.service_account_path, "GOOGLE_ALLOW_HTTP": "true"}

    @classmethod
    def start(cls) -> GCSServer:
        try:
            binary = emulator_binary()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            binary, reason = None, str(exc)
        else:
            reason = (
                "no fake-gcs-server binary and no Go to build it: "
                "install Go, or `make gcs-emulator`, or set EOD_FAKE_GCS"
            )
        if binary is None:
            if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
                pytest.fail(reason)
            pytest.skip(reason)
        root = tempfile.mkdtemp(prefix="eod-gcs-", dir=os.environ.get("EOD_GCS_ROOT", "/tmp"))
        front, emulator = free_ports(2)
        with open(os.path.join(root, "service-account.json"), "w") as fh:
            json.dump({"gcs_base_url": f"http://127.0.0.1:{front}", "disable_oauth": True,
                       "client_email": "", "private_key": "", "private_key_id": ""}, fh)  # fmt: skip
        server = cls(root, front, emulator)
        reaper_actions: list[dict[str, Any]] = [{"rmtree": root}]
        try:
            # The front forwards the client's Host header, so the emulator's public host is
            # the front's address: its path-style XML routes match on it.
            server._spawn("emulator", [
                binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(emulator),
                "-backend", "memory", "-public-host", f"127.0.0.1:{front}",
                "-external-url", f"http://127.0.0.1:{front}", "-log-level", "error",
            ])  # fmt: skip
            server._spawn("front", [
                sys.executable, "-m", "tests.support.gcs_xml_front",
                "--port", str(front), "--upstream", f"http://127.0.0.1:{emulator}",
            ])  # fmt: skip
            reaper_actions += [{"kill_tree": p.pid} for p in server.procs]
            server.reaper = watch(reaper_actions)
            server._wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(os.path.join(self.root, f"{name}.log"), "wb")
        try:
            proc = subprocess.Popen(
                argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "TMPDIR": self.root},
            )  # fmt: skip
            self.procs.append(proc)
        finally:
            log.close()

    def _wait_ready(self) -> None:
        """Until both answer and the bucket exists (made through the emulator's JSON API)."""
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode}): {self.log_tail()}")
            try:
                request = urllib.request.Request(
                    f"{self.endpoint}/storage/v1/b",
                    data=json.dumps({"name": BUCKET}).encode(),
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                urllib.request.urlopen(request, timeout=2).close()
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 409:  # the bucket is there already
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(
            f"GCS emulator on {self.endpoint} not ready in {READY_SECONDS}s: {self.log_tail()}"
        )

    def log_tail(self, n: int = 2000) -> str:
        names = ("emulator", "front")
        return "\n".join(f"[{name}] " + log_tail(os.path.join(self.root, f"{name}.log"), n) for name in names)

    def stop(self) -> None:
        stop_processes(self.procs, self.root, self.reaper)


if __name__ == "__main__":
    # `make gcs-emulator`: build the binary into the cache now (a second run builds nothing).
    found = emulator_binary()
    print(found or "no Go on PATH: the GCS tests will be skipped")
