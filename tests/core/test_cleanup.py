"""Clean-up of uncommitted attempts through the storage seam (core/cleanup.py): only the
committed generation's other attempts go, and nothing is followed out of the table."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_layout import batch_dir
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import stage_data

BATCH = BatchKey("tests.cleanup", "i-20261120T000000Z-20261121T000000Z")


def test_only_other_attempts_of_the_committed_generation_are_removed(table: str, tmp_path: Any) -> None:
    ref = TableRef.parse(table)
    staged, manifest = stage_data(table, BATCH, pa.table({"id": pa.array([1, 2], pa.int64())}))
    ours, status = commit_batch(ref, BATCH, 0, staged, manifest)
    assert ours and status.committed
    root = os.path.join(table, batch_dir(BATCH))
    kept = os.path.basename(staged.attempt_dir)
    outside = tmp_path / "someone-elses"
    outside.mkdir()
    (outside / "precious.parquet").write_bytes(b"keep me")
    os.makedirs(os.path.join(root, "g0-zombie", "sub"))
    open(os.path.join(root, "g0-zombie", "sub", "part-0.parquet"), "wb").close()
    os.symlink(outside, os.path.join(root, "g0-linked"))  # a link: removed itself, never followed
    open(os.path.join(root, "g0-a-file"), "wb").close()  # no attempt's directory: left
    os.makedirs(os.path.join(root, "g1-next"))  # another generation: left

    removed = remove_uncommitted_attempts(ref, ask(ref, BATCH))

    assert sorted(removed) == [f"{batch_dir(BATCH)}/g0-linked", f"{batch_dir(BATCH)}/g0-zombie"]
    assert sorted(os.listdir(root)) == sorted([kept, "g0-a-file", "g1-next"])
    assert (outside / "precious.parquet").read_bytes() == b"keep me"
    assert os.listdir(os.path.join(root, kept))  # the committed attempt's files are all there
    assert remove_uncommitted_attempts(ref, ask(ref, BATCH)) == []  # twice: nothing more
