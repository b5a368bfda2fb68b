"""The HDFS backend's own edges (issue 24), beyond the storage contract it shares with every
backend (tests/core/test_storage_contract.py): a table root that is a file, table paths that
delta-rs and Spark would spell differently, a rename whose reply is lost, and a writer killed
while its bytes are half written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from typing import Any

import pytest

from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import ConfigurationError, UnsupportedTableError
from airflow_eod.core.storage import UnknownOutcome, put_settled
from airflow_eod.core.table_ref import TableRef

yarn = pytest.mark.yarn


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("hdfs:///lake/t", "names no NameNode"),
        ("hdfs://nn:8020/", "names no NameNode or no directory"),
        ("hdfs://nn:8020/a b/t", "' '"),
        ("hdfs://nn:8020/caf\u00e9/t", "'\u00e9'"),
        ("hdfs://nn:8020/a:b/t", "':'"),
        ("hdfs://nn:8020/a*/t", "'\\*'"),
        ("hdfs://nn:8020/a/../t", "'..'"),
        ("hdfs://nn:8020/a%20b/t", "'%'"),
        ("hdfs://nn:8020/a#b/t", "'#'"),
    ],
)
def test_table_paths_delta_rs_and_spark_would_read_apart_are_refused(uri: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        TableRef.parse(uri)


def test_a_nameservice_not_in_the_configuration_is_refused_naming_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow_eod.core.storage import storage_at

    monkeypatch.setenv("HADOOP_CONF_DIR", "/nonexistent")
    with pytest.raises(
        ConfigurationError, match=r"cannot reach hdfs://nosuchservice: .*hdfs://<host>:8020/path"
    ):
        storage_at(f"hdfs://nosuchservice/t/{uuid.uuid4().hex}")


def test_plain_odd_characters_are_taken() -> None:
    assert TableRef.parse("hdfs://nn:8020/a+b=c,d_e~f/t/").location == "hdfs://nn:8020/a+b=c,d_e~f/t"


@pytest.fixture
def root(mini_yarn: Any) -> str:
    return f"{mini_yarn.namenode}/edges/{uuid.uuid4().hex}"


@yarn
def test_a_table_root_that_is_a_file_is_refused_for_good(root: str) -> None:
    from hdfs_native import Client

    authority, path = root.split("/edges/", 1)
    with Client(authority).create(f"/edges/{path}") as fh:
        fh.write(b"not a table")
    # Refused, not retried: an OSError here would spend every retry of the task in vain.
    with pytest.raises(UnsupportedTableError, match="is a file, not a Delta table directory"):
        open_table(TableRef.parse(root))


class _LosingClient:
    """The real client whose rename's reply is lost: the NameNode renamed (``landed``) or not."""

    def __init__(self, real: Any, *, landed: bool) -> None:
        self._real, self._landed = real, landed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def rename(self, src: str, dst: str, overwrite: bool = False) -> None:
        if self._landed:
            self._real.rename(src, dst, overwrite)
        raise OSError(104, "Connection reset by peer")


@yarn
@pytest.mark.parametrize("landed", [True, False])
def test_a_rename_whose_reply_is_lost_is_settled_by_reading_back(root: str, landed: bool) -> None:
    from airflow_eod.core.storage.hdfs_store import HdfsStorage

    store = HdfsStorage.from_url(root)
    real = store._client
    store._client = _LosingClient(real, landed=landed)  # type: ignore[assignment]
    mine = b'{"attempt": "a-1"}'
    with pytest.raises(UnknownOutcome):
        store.put_if_absent("_delta_log/0.json", mine, attempt="a-1")
    # Settled: read back when it landed; put again (the reply lost once only) when it did not.
    store._client = real
    assert put_settled(store, "_delta_log/0.json", mine, attempt="a-1") is True
    assert put_settled(store, "_delta_log/0.json", b'{"attempt": "a-2"}', attempt="a-2") is False
    assert store.get("_delta_log/0.json") == mine
    assert store.list("_delta_log") == ["0.json"]  # no temporary file is listed


_HALF_WRITER = """
import os, sys, time
import hdfs_native
from airflow_eod.core.storage.hdfs_store import HdfsStorage

real_write = hdfs_native.FileWriter.write

def half(self, buf):
    real_write(self, bytes(buf[: len(buf) // 2]))
    self.hsync()  # the half reaches the DataNodes: a reader of the file could see it
    sys.stdout.write("half\\n")
    sys.stdout.flush()
    time.sleep(600)

hdfs_native.FileWriter.write = half
root, how = sys.argv[1], sys.argv[2]
data = b"x" * (1 << 20)
if how == "seam":
    HdfsStorage.from_url(root).put_if_absent("_delta_log/0.json", data + b"a-dead", attempt="a-dead")
else:  # what a create-in-place put-if-absent would do
    authority, _, path = root.partition("/edges/")
    with hdfs_native.Client(authority).create("/edges/" + path + "/_delta_log/0.json") as fh:
        fh.write(data)
"""


def _killed_mid_write(root: str, how: str) -> None:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))
    )
    child = subprocess.Popen([sys.executable, "-c", _HALF_WRITER, root, how], stdout=subprocess.PIPE, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"half\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)


@yarn
def test_a_writer_killed_mid_write_leaves_nothing_at_the_key(root: str) -> None:
    from airflow_eod.core.storage.hdfs_store import TMP, HdfsStorage

    _killed_mid_write(root, "seam")
    store = HdfsStorage.from_url(root)
    # Its half-written temporary file is there, under its lease, but not at the key, and not listed.
    raw = [s.path.rsplit("/", 1)[-1] for s in store._client.list_status(store._path("_delta_log"))]
    assert len(raw) == 1 and raw[0].startswith(TMP), raw
    assert store.head("_delta_log/0.json") is None and store.list("_delta_log") == []
    # The retry's attempt writes the key whole.
    assert put_settled(store, "_delta_log/0.json", b'{"attempt": "a-2"}', attempt="a-2") is True
    assert store.get("_delta_log/0.json") == b'{"attempt": "a-2"}'


@yarn
def test_why_not_create_in_place_a_killed_writer_leaves_a_half_file_at_its_name(root: str) -> None:
    """The design's reason: a file created at its final name is visible, and readable up to
    what the DataNodes acknowledged, while its dead writer's lease runs (an hour, by default)."""
    from airflow_eod.core.storage.hdfs_store import HdfsStorage

    _killed_mid_write(root, "in-place")
    store = HdfsStorage.from_url(root)
    head = store.head("_delta_log/0.json")
    assert head is not None and head.size < 1 << 20
