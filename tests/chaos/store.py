"""Where a chaos trial's tables live: in the trial's temporary directory (``local``, the
default), on S3 (``--store s3``: one SeaweedFS server for the run, ``tests/support/s3_server.py``)
or on HDFS (``--store hdfs``: Hadoop's mini cluster for the run, ``tests/support/mini_yarn.py``;
tables under ``hdfs://localhost:<port>/<run>/<world>/<table>``, no storage options, landing
files local; left out as on S3: the delta-spark engine, Delta Spark as a writer, the quarantine).

On S3 each trial's tables (and with them their plan logs, markers and staged attempts, which
live beside the table) are ``s3://<bucket>/<run>/<world>/<table>``. The landing directories
stay local, unless the run puts them on S3 too (``--landing-store s3``): then every file the
trial's world writes, rewrites, deletes or moves in ``<tmp>/landing/...`` is done to
``s3://<bucket>/<run>/<world>/landing/...`` as well (:class:`LandingMirror`; the local copy
keeps the world's bookkeeping simple), and the landing pipelines plan and read that prefix.
The harness, its warm children (``tests/chaos/attempt.py``) and the checker
(``tests/chaos/oracle.py``) all name a table by its URI and get its :class:`TableRef` here,
with the store's storage options attached.

The options reach the children through :data:`STORE_ENV`, a test-only environment variable
holding the run's root and the S3 server's storage options as JSON. airflow-eod itself never
takes storage options (or any secret) from the environment like this: a load gets them from
its Airflow connection each time (docs/reference.md). The variable exists so that a child
process the harness SIGKILLs can reach the same throwaway test server as its parent.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from deltalake import DeltaTable

from airflow_eod.core.table_ref import TableRef

# Test-only (see the module's docstring):
# {"root": "s3://bucket/run", "options": {...}, "landing": true|false}.
STORE_ENV = "EOD_CHAOS_S3"
STORES = ("local", "s3", "hdfs")
# Where the landing files may live (HDFS takes no landing files: docs/object-stores.md).
LANDING_STORES = ("local", "s3")


def _conf() -> dict[str, Any] | None:
    raw = os.environ.get(STORE_ENV)
    return json.loads(raw) if raw else None


def on_s3() -> bool:
    """Whether this run's tables are on a store (S3, or HDFS with ``--store hdfs``), not local."""
    return _conf() is not None


def landing_on_s3() -> bool:
    """Whether this run's landing files are on S3 as well."""
    conf = _conf()
    return bool(conf and conf.get("landing"))


def landing_source_args(tmp: str, local: str) -> dict[str, Any]:
    """The ``path`` (and ``storage_options``) a landing source of the trial ``tmp`` is given
    for its local directory ``local``: the same directory on S3 when the landing is there."""
    conf = _conf()
    if conf is None or not conf.get("landing"):
        return {"path": local}
    rel = os.path.relpath(local, tmp).replace(os.sep, "/")
    return {"path": f"{conf['root']}/{os.path.basename(tmp)}/{rel}", "storage_options": conf["options"]}


def with_landing_options(source: Any) -> Any:
    """``source`` with the store's options where it reads a landing prefix on S3: a source
    rebuilt from its dict (a SIGKILLed child's) has none, they are never serialized."""
    from airflow_eod.sources.landing_files import LandingFilesSource

    conf = _conf()
    if (
        conf is not None
        and isinstance(source, LandingFilesSource)
        and source.path.startswith("s3://")
        and source.storage_options is None
    ):
        return dataclasses.replace(source, storage_options=conf["options"])
    return source


class LandingMirror:
    """Does each change the world makes to a landing file of the trial ``tmp`` to its copy
    under the trial's prefix on S3 (one put or delete per change, overwriting in place)."""

    def __init__(self, *, tmp: str) -> None:
        from airflow_eod.core.storage import storage_at

        conf = _conf()
        assert conf is not None, "a landing mirror needs the run's S3 store"
        self.tmp = tmp
        self.storage = storage_at(f"{conf['root']}/{os.path.basename(tmp)}", conf["options"])

    def _key(self, path: str) -> str:
        return os.path.relpath(path, self.tmp).replace(os.sep, "/")

    def put(self, path: str, data: bytes) -> None:
        """The local file ``path`` now holds ``data``."""
        self.storage.put(self._key(path), data)

    def delete(self, path: str) -> None:
        """The local file ``path`` is gone."""
        self.storage.delete(self._key(path))

    def folder(self, path: str) -> None:
        """The local directory ``path`` exists (perhaps empty): its folder marker (an empty
        object named ``<prefix>/``, what the AWS console's "Create folder" writes), so that an
        empty landing prefix is an empty folder, not a missing source, as on the disk."""
        from tests.support.s3_raw import raw_put

        conf = _conf()
        assert conf is not None
        bucket, _, root = self.storage.where(self._key(path)).removeprefix("s3://").partition("/")
        raw_put(conf["options"], bucket, root + "/", b"")


def table_uri(tmp: str, name: str) -> str:
    """The URI of the table ``name`` of the trial whose local directory is ``tmp``."""
    conf = _conf()
    if conf is None:
        return os.path.join(tmp, name)
    return f"{conf['root']}/{os.path.basename(tmp)}/{name}"


def world_root(tmp: str) -> str | None:
    """The prefix every table of the trial ``tmp`` is under on S3 (``None``: local tables,
    removed with ``tmp``)."""
    conf = _conf()
    return None if conf is None else f"{conf['root']}/{os.path.basename(tmp)}"


def ref(uri: str) -> TableRef:
    """The reference to the table at ``uri``, with the store's options where it is on S3."""
    conf = _conf()
    if conf is not None and uri.startswith("s3://"):
        return TableRef.parse(uri, conf["options"])
    return TableRef.parse(uri)


def delta(uri: str) -> DeltaTable:
    """The table at ``uri``, read with delta-rs."""
    r = ref(uri)
    return DeltaTable(r.location, storage_options=r.storage_options or None)


def exists(uri: str) -> bool:
    """Whether a Delta table is at ``uri`` (its log has a commit)."""
    if "://" not in uri:
        return os.path.isdir(os.path.join(uri, "_delta_log"))
    return bool(ref(uri).storage().list("_delta_log"))


def log_is_whole(uri: str) -> bool:
    """Whether the log still has its first commit (no log clean-up yet): a replay can read it."""
    if "://" not in uri:
        return os.path.isfile(os.path.join(uri, "_delta_log", f"{0:020d}.json"))
    return ref(uri).storage().head(f"_delta_log/{0:020d}.json") is not None


def rows_by_log(uri: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """Every visible row, read by a second reader that replays the JSON commits itself (not
    delta-rs) and reads each live file with pyarrow; on S3 through the table's storage."""
    if "://" not in uri:
        from airflow_eod.examples.compare import read_rows_by_log

        return read_rows_by_log(uri, columns)
    import pyarrow.parquet as pq

    storage = ref(uri).storage()
    live: dict[str, dict[str, Any]] = {}
    for name in sorted(n for n in storage.list("_delta_log") if n.endswith(".json") and n[:20].isdigit()):
        for line in storage.get(f"_delta_log/{name}").decode("utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                live[unquote(action["add"]["path"])] = action["add"]
            elif "remove" in action:
                live.pop(unquote(action["remove"]["path"]), None)
    rows: list[tuple[Any, ...]] = []
    for path, add in sorted(live.items()):
        for record in pq.read_table(io.BytesIO(storage.get(path))).to_pylist():
            record.update(add.get("partitionValues") or {})
            rows.append(tuple(record.get(c) for c in columns))
    return rows


def remove_world(tmp: str) -> None:
    """Remove the trial's tables (and landing files) from S3 (local ones go with ``tmp``)."""
    conf = _conf()
    if conf is None:
        return
    from airflow_eod.core.storage import storage_at

    storage_at(conf["root"], conf["options"]).delete_prefix(os.path.basename(tmp))


def store_env(server: Any, run: str | None = None, *, landing: bool = False) -> str:
    """The value of :data:`STORE_ENV` for ``server`` (an S3Server): a root of the run's own;
    ``landing``: the landing files there too."""
    run = run or f"chaos-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    root = f"s3://{server.bucket}/{run}"
    return json.dumps({"root": root, "options": server.options(), "landing": landing})


def hdfs_env(cluster: Any, run: str | None = None) -> str:
    """The value of :data:`STORE_ENV` for ``cluster`` (a MiniYarn): a root of the run's own on
    its HDFS, no storage options (HDFS takes none), the landing files local."""
    run = run or f"chaos-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return json.dumps({"root": f"{cluster.namenode}/{run}", "options": {}, "landing": False})


@contextmanager
def hdfs_store() -> Iterator[Any]:
    """Start Hadoop's mini cluster for a run and point the harness (and its children) at its
    HDFS; stop it at the end."""
    from tests.support.mini_yarn import MiniYarn

    cluster = MiniYarn.start()
    before = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = hdfs_env(cluster)
    try:
        yield cluster
    finally:
        if before is None:
            os.environ.pop(STORE_ENV, None)
        else:
            os.environ[STORE_ENV] = before
        cluster.stop()


@contextmanager
def s3_store(*, landing: bool = False) -> Iterator[Any]:
    """Start one SeaweedFS S3 server for a run and point the harness (and its children, by
    :data:`STORE_ENV`) at it, the landing files too with ``landing``; stop it at the end."""
    from tests.support.s3_server import S3Server

    server = S3Server.start()
    before = os.environ.get(STORE_ENV)
    os.environ[STORE_ENV] = store_env(server, landing=landing)
    try:
        yield server
    finally:
        if before is None:
            os.environ.pop(STORE_ENV, None)
        else:
            os.environ[STORE_ENV] = before
        server.stop()


def quarantine_ref(table: TableRef, uri: str | None) -> TableRef | None:
    """The quarantine table a load of ``table`` is configured with (``None``: none), as the
    operator passes it to the settle step."""
    return None if uri is None else table.neighbour(uri, "quarantine_table_uri")
