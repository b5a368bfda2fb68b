"""Review of issue 20 (the storage seam), adversarial findings, second pass (I11).

Finding 1: a driver's error file is written through a storage rooted at the spec's own
directory (``storage_at(<table>/_eod/specs)``), so the link check of the seam never looks at
``_eod`` or ``_eod/specs``: when either is a link leading out of the table (planted after the
task wrote the spec, while Spark ran), the driver wrote ``<outside>/specs/<spec>.error.json``.
On c2eb266 the first test failed with::

    AssertionError: the driver wrote outside the table: ['specs/abc-g0-x.json.error.json']

Finding 2: the clean-up of uncommitted attempts lists the batch directory once and then
removes each ``g<gen>-*`` entry with ``delete_prefix``, whose storage remembers the
directories it once found to be no link (``LocalStorage._no_links``) and removes by path.
A batch directory swapped for a link leading out of the table between two removals (here at
the ``in_cleanup`` fault point, after the first one) made the second removal ``rmtree`` a
directory outside the table. On c2eb266 the second test failed with::

    AssertionError: the clean-up removed a directory outside the table

Fixed: the driver writes the error file of a table's spec (``<table>/_eod/specs/``) through
the table's storage (a spec elsewhere, as tests and hand runs place it, still gets its error
beside it); ``LocalStorage.delete`` and ``delete_prefix`` remove relative to the parent
directory opened name by name from the root with ``O_NOFOLLOW`` (``rmtree(dir_fd=...)``,
``unlink(dir_fd=...)``): a directory swapped for a link after the check is never followed.

Finding 3: the ask and the audit read a commit over 16 MB in ranges, each line bounded but
not the file: a 16 GiB sparse commit of zeros (1 MB on disk) held the ask for minutes (about
5 s per GiB). Fixed: a commit over ``bounded_json.MAX_COMMIT`` (2 GiB) is refused unread.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

import airflow_eod.core.cleanup as cleanup
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import CorruptTableError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_layout import batch_dir
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark import driver
from tests.support.helpers import stage_data

BATCH = BatchKey("tests.i20b", "i-20260101T000000Z-20260102T000000Z")


def _tree(root) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(folder, n), root) for folder, _, files in os.walk(root) for n in files
    )


def test_a_drivers_error_file_is_never_written_through_a_link_out_of_the_table(tmp_path):
    table, outside = tmp_path / "t", tmp_path / "outside"
    (table / "_delta_log").mkdir(parents=True)
    (outside / "specs").mkdir(parents=True)
    # The task wrote the spec; while Spark ran, _eod became a link leading out of the table.
    os.symlink(outside, table / "_eod")
    spec = str(table / "_eod" / "specs" / "abc-g0-x.json")

    driver.write_error(spec, RuntimeError("boom"), "tests.i20b/b")

    assert _tree(outside) == [], f"the driver wrote outside the table: {_tree(outside)}"


def test_a_drivers_error_file_still_lands_beside_its_spec_in_the_table(tmp_path):
    table = tmp_path / "t"
    (table / "_eod" / "specs").mkdir(parents=True)
    spec = str(table / "_eod" / "specs" / "abc-g0-x.json")

    driver.write_error(spec, RuntimeError("boom"), "tests.i20b/b")

    with open(spec + ".error.json", "rb") as fh:
        error = driver.error_from(fh.read())
    assert error is not None and "boom" in str(error)


def test_cleanup_never_removes_outside_the_table_when_the_batch_dir_is_swapped_for_a_link(
    tmp_path, monkeypatch
):
    table, outside = tmp_path / "t", tmp_path / "outside"
    table.mkdir()
    (outside / "g0-zzz").mkdir(parents=True)
    (outside / "g0-zzz" / "precious").write_text("not the table's")
    ref = TableRef.parse(str(table))
    rows = pa.table({"id": pa.array(range(3), pa.int64())})
    commit_batch(ref, BATCH, 0, *stage_data(str(table), BATCH, rows))
    folder = table / batch_dir(BATCH)
    (folder / "g0-aaa").mkdir()  # two attempts that never committed
    (folder / "g0-zzz").mkdir()

    def swap(name: str) -> None:  # someone sharing the lake, between two removals
        if name == "in_cleanup" and not os.path.islink(folder):
            os.rename(folder, str(folder) + "-moved")
            os.symlink(outside, folder)

    monkeypatch.setattr(cleanup, "fault_point", swap)
    cleanup.remove_uncommitted_attempts(ref, ask(ref, BATCH))

    assert (outside / "g0-zzz" / "precious").exists(), "the clean-up removed a directory outside the table"


_ASK_IN_A_CHILD = """
import sys
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.table_ref import TableRef
try:
    ask(TableRef.parse(sys.argv[1]), BatchKey("tests.i20b", "i-20260102T000000Z-20260103T000000Z"))
except Exception as exc:  # a refusal is an answer too
    print(type(exc).__name__, exc)
"""


def test_the_ask_does_not_read_a_sparse_commit_of_zeros_to_its_end(tmp_path):
    """Finding 3, fixed: on c2eb266 the child asking the table below was still reading
    commit 1 (16 GiB of sparse zeros, 1 MB on disk) when its 20 s ran out::

        subprocess.TimeoutExpired: Command '[...python, '-c', ...]' timed out after 20 seconds

    The ranged reading of commits over 16 MB (object_lines) bounded each line, not the
    object: the ask (a thread of the shared triggerer) read any size a file claimed. A commit
    over bounded_json.MAX_COMMIT (2 GiB) is now refused unread, as a corrupt table file, by
    the ask and by the audit."""
    table = tmp_path / "t"
    table.mkdir()
    ref = TableRef.parse(str(table))
    commit_batch(ref, BATCH, 0, *stage_data(str(table), BATCH, pa.table({"id": pa.array([1], pa.int64())})))
    size = 16 << 30
    commit = table / "_delta_log" / f"{1:020d}.json"
    with open(commit, "wb") as fh:
        for offset in range(32 << 20, size, 32 << 20):
            fh.seek(offset)
            fh.write(b"\n")
        fh.truncate(size)
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", _ASK_IN_A_CHILD, str(table)], env=env, timeout=60, check=False,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.stdout.startswith("CorruptTableError"), done.stdout + done.stderr
    assert str(commit) in done.stdout and "larger than 2147483648 bytes" in done.stdout
    from airflow_eod.core.audit.verify import audit_table

    with pytest.raises(CorruptTableError, match="larger than 2147483648 bytes"):
        audit_table(str(table))
