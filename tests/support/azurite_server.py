"""Start and stop a throwaway Azure Blob server on 127.0.0.1 for the `objectstore` tests: Azurite.

Azurite is Microsoft's emulator of Azure Storage, published on npm (``azurite``), so it needs
Node.js and npm. :func:`azurite_binary` installs the pinned release once with npm into a cache
folder (``~/.cache/airflow-eod/npm/azurite-<version>``, its npm download cache beside it): a
second run installs nothing. ``EOD_AZURITE`` names an ``azurite-blob`` of your own instead.

Only the blob service runs (``azurite-blob``; ADLS Gen2's DFS endpoint is not emulated, and
``abfss://`` URLs are served through the blob endpoint, as obstore does), on a free port of
127.0.0.1, with its data (the extents and the LokiJS database) in a temporary folder and its
telemetry off. The process runs in a session of its own; the reaper (tests/support/reaper.py)
kills its tree and removes its folder if this process dies without :meth:`AzuriteServer.stop`.
The container is made with one Shared Key signed ``Create Container`` request (obstore makes
no containers).

``python -m tests.support.azurite_server`` installs Azurite into the cache and prints the path
of its ``azurite-blob`` (``make azurite`` runs it).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.utils import formatdate

import pytest

from tests.support.loopback import free_port, log_tail, stop_processes
from tests.support.reaper import Reaper, watch

AZURITE_VERSION = "3.37.0"
# The emulator's one account and its key, the same in every Azurite (published by Microsoft).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "eod"
API_VERSION = "2021-08-06"
READY_SECONDS = 60.0
INSTALL_SECONDS = 600.0

CACHE = os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "airflow-eod", "npm"
)


class Missing(Exception):
    """What Azurite needs is not here (Node.js, npm, or the install failed)."""


def azurite_binary(cache: str = CACHE) -> str:
    """``EOD_AZURITE``, else the ``azurite-blob`` of the pinned release in ``cache``, installed
    there with npm first when the cache lacks it.

    The install goes to a temporary folder beside its place and is renamed into it, so an
    interrupted install never leaves a half package that a later run would take as installed.

    :raises Missing: when node or npm is missing or the install fails.
    """
    if os.environ.get("EOD_AZURITE"):
        return os.environ["EOD_AZURITE"]
    place = os.path.join(cache, f"azurite-{AZURITE_VERSION}")
    binary = os.path.join(place, "node_modules", ".bin", "azurite-blob")
    if shutil.which("node") is None:
        raise Missing(
            "Node.js is missing (Azurite runs on it): install it and npm (apt-get install nodejs npm)"
        )
    if os.access(binary, os.X_OK):
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise Missing("npm is missing (it installs Azurite): install npm, e.g. apt-get install npm")
    os.makedirs(cache, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=cache, prefix=".install-")
    try:
        done = subprocess.run(
            [npm, "install", "--prefix", tmp, "--cache", os.path.join(cache, ".npm-cache"),
             "--no-audit", "--no-fund", "--loglevel=error", f"azurite@{AZURITE_VERSION}"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=INSTALL_SECONDS, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace")[-800:]
            raise Missing(f"npm install azurite@{AZURITE_VERSION} failed: {why}")
        try:
            os.rename(tmp, place)
        except OSError:  # another session installed it meanwhile: theirs is as good
            if not os.access(binary, os.X_OK):
                raise
    except subprocess.TimeoutExpired as exc:
        raise Missing(f"npm install azurite@{AZURITE_VERSION} took over {INSTALL_SECONDS:.0f}s") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return binary


@dataclass
class AzuriteServer:
    root: str
    port: int
    proc: subprocess.Popen[bytes]
    reaper: Reaper | None = None

    host = "127.0.0.1"
    account = ACCOUNT
    account_key = ACCOUNT_KEY
    container = CONTAINER

    @property
    def endpoint(self) -> str:
        """The blob endpoint, path style: Azurite names the account in the first path segment."""
        return f"http://{self.host}:{self.port}/{ACCOUNT}"

    def options(self) -> dict[str, str]:
        """Storage options for this server, named as delta-rs names them.

        ``AZURE_STORAGE_USE_EMULATOR`` is not among them: with it obstore ignores the endpoint
        and talks to ``AZURITE_BLOB_STORAGE_URL`` (a variable of the whole process), else to
        port 10000; an explicit endpoint is what lets each session have a port of its own.
        """
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
            "AZURE_ALLOW_HTTP": "true",
        }

    @classmethod
    def start(cls) -> AzuriteServer:
        try:
            binary = azurite_binary()
        except Missing as exc:
            if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
                pytest.fail(str(exc))
            pytest.skip(str(exc))
        root = tempfile.mkdtemp(prefix="eod-azurite-")
        port = free_port()
        argv = [
            binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", root,
            "--disableTelemetry", "--skipApiVersionCheck", "--silent",
        ]  # fmt: skip
        log = open(os.path.join(root, "log"), "wb")
        try:
            proc = subprocess.Popen(
                argv, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        reaper = watch([{"kill_tree": proc.pid}, {"rmtree": root}])
        server = cls(root, port, proc, reaper)
        try:
            server._wait_ready()
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self) -> None:
        """Until the blob port answers and the container exists."""
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"azurite-blob exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                status = self.create_container(self.container)
            except OSError:
                time.sleep(0.3)
                continue
            if status in (201, 409):  # made, or there already
                return
            raise RuntimeError(f"Azurite answered {status} to Create Container: {self.log_tail()}")
        raise RuntimeError(f"Azurite on {self.endpoint} not ready in {READY_SECONDS}s: {self.log_tail()}")

    def create_container(self, name: str) -> int:
        """``Create Container``, signed with the account's Shared Key; the HTTP status."""
        date = formatdate(usegmt=True)
        content_type = "application/octet-stream"
        # The string to sign: verb, eleven standard headers (Content-Length empty when 0), the
        # x-ms-* headers, then the resource (path style: the account, then the URL's path).
        to_sign = "\n".join(
            ["PUT", "", "", "", "", content_type, "", "", "", "", "", "",
             f"x-ms-date:{date}", f"x-ms-version:{API_VERSION}",
             f"/{ACCOUNT}/{ACCOUNT}/{name}", "restype:container"]
        )  # fmt: skip
        mac = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest()
        request = urllib.request.Request(
            f"{self.endpoint}/{name}?restype=container",
            method="PUT",
            data=b"",
            headers={
                "Content-Type": content_type,
                "x-ms-date": date,
                "x-ms-version": API_VERSION,
                "Authorization": f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def log_tail(self, n: int = 2000) -> str:
        return log_tail(os.path.join(self.root, "log"), n)

    def stop(self) -> None:
        stop_processes([self.proc], self.root, self.reaper)


if __name__ == "__main__":
    try:
        print(azurite_binary())
    except Missing as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
