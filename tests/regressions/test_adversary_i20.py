"""Review of issue 20 (the storage seam refactor), adversarial findings.

Finding (pre-existing, kept by the refactor): the checkpoint index's clean-up of old indexes
(``_drop_old``) removed *every* name under ``_eod/checkpoints`` outside the newest three
"versions", whatever the name. A link ``_eod/checkpoints`` planted inside the table that
leads to the table root (inside the root, so the I11 check lets it pass) made the first
checkpoint after it remove ``_delta_log`` and ``_eod`` with ``rmtree``: the whole table
lost. Only names of the index's own shape (``<20-digit version>.<16 hex>``) are removed now.
"""

from __future__ import annotations

import os

from airflow_eod.core.delta.checkpoint_index import write_index
from airflow_eod.core.table_ref import TableRef


def test_checkpoint_index_cleanup_never_removes_the_delta_log_through_an_inside_link(tmp_path):
    table = tmp_path / "t"
    (table / "_delta_log").mkdir(parents=True)
    (table / "_eod").mkdir()
    (table / "_delta_log" / f"{0:020d}.json").write_text("{}\n")
    checkpoint = table / "_delta_log" / f"{10:020d}.checkpoint.parquet"
    checkpoint.write_bytes(b"")
    for i in range(1, 5):  # data files at the root, as Delta Spark writes them
        (table / f"part-0000{i}-aaaa.snappy.parquet").write_text("x")
    os.symlink("..", table / "_eod" / "checkpoints")  # inside the table: I11 lets it pass

    write_index(TableRef.parse(str(table)), 10, [str(checkpoint)], {"metaData": {}, "protocol": {}}, {})

    assert (table / "_delta_log" / f"{0:020d}.json").exists(), "the Delta log was removed"
    assert (table / "_eod").is_dir(), "the plan log was removed"
    assert len(list(table.glob("part-*.parquet"))) == 4
