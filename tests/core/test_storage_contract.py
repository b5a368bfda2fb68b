"""The contract of the storage seam (:mod:`airflow_eod.core.storage.base`), run against every
backend: the local filesystem today, the object stores of the next issue unchanged."""

from __future__ import annotations

import errno
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.storage import BoundError, LocalStorage, NotFound, Storage, object_lines, settle_put
from airflow_eod.core.storage import local as local_backend


def _s3(request: pytest.FixtureRequest, tmp_path: Any) -> Storage:
    """The S3 backend on the session's SeaweedFS server, under a prefix of this test's own."""
    from airflow_eod.core.storage.object_store import S3Storage

    server = request.getfixturevalue("s3_server")
    return S3Storage.from_url(f"s3://{server.bucket}/contract/{uuid.uuid4().hex}", server.options())


def _azure(request: pytest.FixtureRequest, tmp_path: Any) -> Storage:
    """The Azure Blob backend on the session's Azurite server, under a prefix of this test's own."""
    from airflow_eod.core.storage.azure_store import AzureStorage

    server = request.getfixturevalue("azure_server")
    return AzureStorage.from_url(f"az://{server.container}/contract/{uuid.uuid4().hex}", server.options())


def _gcs(request: pytest.FixtureRequest, tmp_path: Any) -> Storage:
    """The GCS backend on the session's fake-gcs-server, under a prefix of this test's own."""
    from airflow_eod.core.storage.gcs_store import GCSStorage

    server = request.getfixturevalue("gcs_server")
    return GCSStorage.from_url(f"gs://{server.bucket}/contract/{uuid.uuid4().hex}", server.options())


def _hdfs(request: pytest.FixtureRequest, tmp_path: Any) -> Storage:
    """The HDFS backend on the session's mini cluster, under a directory of this test's own."""
    from airflow_eod.core.storage.hdfs_store import HdfsStorage

    cluster = request.getfixturevalue("mini_yarn")
    return HdfsStorage.from_url(f"{cluster.namenode}/contract/{uuid.uuid4().hex}")


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Any], Storage]] = {
    "local": lambda request, tmp_path: LocalStorage(root=str(tmp_path / "root")),
    "s3": _s3,
    "azure": _azure,
    "gcs": _gcs,
    "hdfs": _hdfs,
}
# Servers whose delimiter listing still names a "directory" emptied a moment ago: SeaweedFS
# 4.48 keeps the filer's folder entry after its last object is deleted (its EmptyFolderCleaner
# removes it later, asynchronously: still listed 40 s on, here). S3 itself has no folders: a
# prefix with no object under it is never a CommonPrefix. A reader of the listing must take an
# empty name for nothing there (delete_prefix of it answers False).
KEEPS_EMPTY_PREFIXES = {"s3"}
# What each backend needs beyond Python (tests/support/tiers.py): local runs in the unit tier.
NEEDS = {name: [pytest.mark.objectstore] for name in ("s3", "azure", "gcs")}
NEEDS["hdfs"] = [pytest.mark.yarn]


@pytest.fixture(params=[pytest.param(name, marks=NEEDS.get(name, [])) for name in sorted(BACKENDS)])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Storage]:
    yield BACKENDS[request.param](request, tmp_path)


def test_put_if_absent_twice_the_second_loses_and_says_so(store: Storage) -> None:
    assert store.put_if_absent("log/00.json", b"first") is True
    assert store.put_if_absent("log/00.json", b"second") is False
    assert store.get("log/00.json") == b"first"
    # The same bytes again, without an attempt id, are no proof of authorship either.
    assert store.put_if_absent("log/00.json", b"first") is False


def test_racing_put_if_absent_exactly_one_wins(store: Storage) -> None:
    writers = 8
    barrier = threading.Barrier(writers)
    won: list[int] = []

    def race(n: int) -> None:
        barrier.wait()
        if store.put_if_absent("race/commit.json", f"writer {n}".encode(), attempt=f"writer {n}"):
            won.append(n)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1, won
    assert store.get("race/commit.json") == f"writer {won[0]}".encode()


def test_an_unknown_outcome_is_settled_by_reading_back_the_attempt_id(store: Storage) -> None:
    """The write landed but its reply was lost: the attempt tries again. The same attempt
    learns it wrote the object; another attempt learns someone else did."""
    body = b'{"attempt": "a-1", "rows": 3}'
    assert store.put_if_absent("log/07.json", body, attempt="a-1") is True
    # (reply lost) the retry of the same attempt:
    assert store.put_if_absent("log/07.json", body, attempt="a-1") is True
    assert store.put_if_absent("log/07.json", b'{"attempt": "a-2", "rows": 3}', attempt="a-2") is False
    # An attempt whose body differs although the id is the same never claims another's bytes.
    assert store.put_if_absent("log/07.json", b'{"attempt": "a-1", "rows": 4}', attempt="a-1") is False
    assert store.get("log/07.json") == body


def test_an_attempt_id_the_body_does_not_carry_is_refused(store: Storage) -> None:
    with pytest.raises(ValueError, match="attempt id"):
        store.put_if_absent("log/08.json", b"{}", attempt="a-1")
    assert store.head("log/08.json") is None


def test_settling_an_unknown_outcome_reads_back_and_puts_again_when_nothing_landed(store: Storage) -> None:
    """What a writer runs after :class:`UnknownOutcome` rests on the backend's ``get`` and
    ``put_if_absent`` alone: nothing there, put again; the bytes meant, mine; others, not."""
    mine = b'{"attempt": "a-1", "rows": 3}'
    assert settle_put(store, "s/1.json", mine, attempt="a-1") is True  # the write never landed
    assert store.get("s/1.json") == mine
    assert settle_put(store, "s/1.json", mine, attempt="a-1") is True  # it landed: mine
    assert settle_put(store, "s/1.json", b'{"attempt": "a-2", "rows": 3}', attempt="a-2") is False
    # An object that merely starts with the bytes meant is another's (and is not read whole).
    store.put_if_absent("s/2.json", mine + b" and more")
    assert settle_put(store, "s/2.json", mine, attempt="a-1") is False
    assert store.get("s/1.json") == mine


def test_put_overwrites_and_readers_see_old_or_new_whole(store: Storage) -> None:
    old, new = b"o" * 200_000, b"n" * 300_000
    store.put("state/last.json", old)
    seen: set[bytes] = set()
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            seen.add(store.get("state/last.json"))

    reader = threading.Thread(target=read)
    reader.start()
    for _ in range(20):
        store.put("state/last.json", new)
        store.put("state/last.json", old)
    stop.set()
    reader.join()
    assert seen <= {old, new}, {len(s) for s in seen}
    store.put("state/last.json", new)
    assert store.get("state/last.json") == new
    head = store.head("state/last.json")
    assert head is not None and head.size == len(new)


def test_list_is_sorted_and_keeps_to_its_prefix(store: Storage) -> None:
    for key in ("a/2.json", "a/10.json", "a/1.json", "a/sub/x.json", "ab/1.json", "b.json"):
        assert store.put_if_absent(key, key.encode())
    assert store.list("a") == ["1.json", "10.json", "2.json", "sub"]
    assert store.list("a/") == ["1.json", "10.json", "2.json", "sub"]
    assert store.list("a/sub") == ["x.json"]
    assert store.list("nothing/here") == []


def test_has_prefix_says_whether_anything_is_below_and_only_below(store: Storage) -> None:
    assert not store.has_prefix("hp")
    store.put("hpx/a.json", b"1")  # a name that merely starts the same way is not below "hp"
    assert not store.has_prefix("hp")
    store.put("hp/deep/b.json", b"2")
    assert store.has_prefix("hp") and store.has_prefix("hp/deep") and not store.has_prefix("hp/other")
    store.delete_prefix("hp")
    assert not store.has_prefix("hp/deep")


def test_head_and_get_of_a_missing_object(store: Storage) -> None:
    assert store.head("no/such.json") is None
    with pytest.raises(NotFound):
        store.get("no/such.json")
    with pytest.raises(FileNotFoundError):  # NotFound is one
        store.get("missing.json")


def test_get_with_a_limit_reads_no_more(store: Storage) -> None:
    store.put("big.json", b"x" * 100)
    assert store.get("big.json", limit=100) == b"x" * 100
    with pytest.raises(ValueError, match="larger than 99 bytes"):
        store.get("big.json", limit=99)


def test_get_range_reads_a_piece_and_nothing_past_the_end(store: Storage) -> None:
    store.put("r.json", bytes(range(100)))
    assert store.get_range("r.json", 10, 5) == bytes(range(10, 15))
    assert store.get_range("r.json", 95, 50) == bytes(range(95, 100))
    assert store.get_range("r.json", 100, 10) == b""
    with pytest.raises(NotFound):
        store.get_range("none.json", 0, 10)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_object_lines_splits_across_ranges_and_bounds_each_line(store: Storage, chunk: int) -> None:
    body = b'{"a": 1}\n\n{"b": [1, 2]}\n{"c": "no newline at the end"}'
    store.put("c.json", body)
    size = len(body)
    got = list(object_lines(store, "c.json", size, limit=64, chunk=chunk))
    assert got == [b'{"a": 1}\n', b"\n", b'{"b": [1, 2]}\n', b'{"c": "no newline at the end"}']
    assert b"".join(got) == body
    # Only what the caller saw is read: bytes appended since are not.
    assert b"".join(object_lines(store, "c.json", 9, limit=64, chunk=chunk)) == body[:9]
    with pytest.raises(BoundError, match="longer than 12 bytes"):
        list(object_lines(store, "c.json", size, limit=12, chunk=chunk))


def test_object_lines_refuses_a_long_line_without_holding_it(store: Storage) -> None:
    """A line of 1 MB under a limit of 1 KB: refused after at most limit + chunk bytes."""
    store.put("long.json", b"x" * (1 << 20))
    reads: list[int] = []
    real = store.get_range

    def counting(key: str, start: int, length: int) -> bytes:
        reads.append(length)
        return real(key, start, length)

    store.get_range = counting  # type: ignore[method-assign]
    with pytest.raises(BoundError):
        list(object_lines(store, "long.json", 1 << 20, limit=1024, chunk=4096))
    assert sum(reads) <= 1024 + 4096


def test_delete_is_idempotent(store: Storage) -> None:
    store.put("specs/s.json", b"{}")
    assert store.delete("specs/s.json") is True
    assert store.delete("specs/s.json") is False
    assert store.head("specs/s.json") is None
    assert store.delete("never/was.json") is False


def _objects_under(store: Storage, prefix: str) -> list[str]:
    """Every object below ``prefix`` (an empty "directory" holds none)."""
    found = []
    for name in store.list(prefix):
        key = f"{prefix}/{name}"
        if store.list(key):
            found += _objects_under(store, key)
        elif store.head(key) is not None:
            found.append(key)
    return found


def test_delete_prefix_removes_everything_below_and_nothing_beside(
    store: Storage, request: pytest.FixtureRequest
) -> None:
    for key in ("d/g0-a/part-1.parquet", "d/g0-a/x/part-2.parquet", "d/g0-ab/part-1.parquet"):
        store.put(key, b"p")
    assert store.delete_prefix("d/g0-a") is True
    assert _objects_under(store, "d") == ["d/g0-ab/part-1.parquet"]
    if request.node.callspec.params["store"] not in KEEPS_EMPTY_PREFIXES:
        assert store.list("d") == ["g0-ab"]
    assert store.delete_prefix("d/g0-a") is False


@pytest.mark.parametrize(
    "name", ["with space.json", "n\u00e4me-\u65e5\u672c.json", "100%25 done%.json", "a+b=c&d.json"]
)
def test_names_with_odd_characters(store: Storage, name: str) -> None:
    key = f"odd/{name}"
    assert store.put_if_absent(key, name.encode()) is True
    assert store.get(key) == name.encode()
    assert store.list("odd") == [name]
    head = store.head(key)
    assert head is not None and head.size == len(name.encode())
    assert store.delete(key) is True


@pytest.mark.parametrize("key", ["../x.json", "/etc/passwd", "a/../../x.json", "a//b.json", "a/./b.json"])
def test_keys_that_could_climb_are_refused(store: Storage, key: str) -> None:
    with pytest.raises(UnsafePathError):
        store.put_if_absent(key, b"x")


# -- the local backend's own cases ----------------------------------------------------------
def test_local_refuses_a_path_escaping_its_root_through_a_link(tmp_path: Any) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.json").write_bytes(b"theirs")
    os.symlink(outside, root / "_eod")
    store = LocalStorage(root=str(root))
    for call in (
        lambda: store.get("_eod/secret.json"),
        lambda: store.head("_eod/secret.json"),
        lambda: store.list("_eod"),
        lambda: store.put_if_absent("_eod/new.json", b"x"),
        lambda: store.put("_eod/secret.json", b"x", private=True),
        lambda: store.delete("_eod/secret.json"),
        lambda: store.delete_prefix("_eod/sub"),
    ):
        with pytest.raises(UnsafePathError, match="outside"):
            call()
    assert sorted(os.listdir(outside)) == ["secret.json"]
    assert (outside / "secret.json").read_bytes() == b"theirs"


def test_local_reads_no_link_at_the_last_name_and_removes_only_the_link(tmp_path: Any) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (outside / "f.json").write_bytes(b"theirs")
    os.symlink(outside / "f.json", root / "d" / "f.json")
    os.symlink(outside, root / "d" / "tree")
    store = LocalStorage(root=str(root))
    with pytest.raises(ValueError, match="symbolic link"):
        store.get("d/f.json")
    assert store.delete("d/f.json") is False  # a link is no object this backend wrote
    assert store.delete_prefix("d/tree") is True  # the link goes, its target stays
    assert store.list("d") == ["f.json"]
    assert (outside / "f.json").read_bytes() == b"theirs"


def test_local_unknown_outcome_after_the_link_landed(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared filesystem made the link and lost the reply (ETIMEDOUT): the attempt whose
    bytes are there wrote it; without an attempt id the error stands."""
    store = LocalStorage(root=str(tmp_path))
    real_link = os.link

    def link_then_lose_the_reply(src: str, dst: str) -> None:
        real_link(src, dst)
        raise OSError(errno.ETIMEDOUT, "reply lost")

    monkeypatch.setattr(local_backend.os, "link", link_then_lose_the_reply)
    assert store.put_if_absent("c/1.json", b"attempt a-1", attempt="a-1") is True
    with pytest.raises(OSError, match="reply lost"):
        store.put_if_absent("c/2.json", b"attempt a-2")
    monkeypatch.setattr(local_backend.os, "link", real_link)
    assert store.put_if_absent("c/1.json", b"attempt a-3", attempt="a-3") is False
    assert not [n for n in os.listdir(tmp_path / "c") if n.startswith(".tmp-eod-")]


def test_local_put_private_is_0600_and_never_writes_through_a_planted_link(tmp_path: Any) -> None:
    outside = tmp_path / "outside.json"
    outside.write_bytes(b"theirs")
    (tmp_path / "root").mkdir()
    os.symlink(outside, tmp_path / "root" / "planted.json")
    store = LocalStorage(root=str(tmp_path / "root"))
    with pytest.raises(UnsafePathError, match="outside"):
        store.put("planted.json", b"mine", private=True)
    assert outside.read_bytes() == b"theirs"
    store.put("spec.json", b"mine", private=True)
    path = tmp_path / "root" / "spec.json"
    assert path.read_bytes() == b"mine"
    assert (os.stat(path).st_mode & 0o777) == 0o600


def test_key_of_inverts_where_and_refuses_what_lies_outside(store: Storage) -> None:
    for key in ("a.json", "_eod/pipelines/p/batches/k/g0.id.json"):
        assert store.key_of(store.where(key)) == key
    outside = store.where("x")[: -len("/x")]  # the root itself
    for where in (outside, outside + "-twin/x", outside.rsplit("/", 1)[0] + "/other/x"):
        with pytest.raises(UnsafePathError):
            store.key_of(where)
