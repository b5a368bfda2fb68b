"""The parts of verify's merge checks that need no table: which ``keys_dir`` a manifest may
name, and which ``delete_when`` text the audit runs (tables: tests/spark/test_merge_verify.py)."""

from __future__ import annotations

import pytest

from airflow_eod.core.audit.delete_sql import delete_sql
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.merge_digest import checked_digest_dir, digest_dir

BATCH = BatchKey("tests.merge", "o-00000001-abc")
OWN = "_eod/merge_keys/tests.merge/o-00000001-abc/g2-attempt1"


def test_the_writer_and_the_reader_agree_on_the_folder() -> None:
    assert digest_dir(BATCH, 2, "attempt1") == OWN
    assert checked_digest_dir(OWN, BATCH, 2) == OWN


@pytest.mark.parametrize(
    "hostile",
    [
        "../../etc",
        "/etc/passwd",
        f"{OWN}/../../../../..",
        "_eod/merge_keys/tests.merge/o-00000002-def/g2-attempt1",  # another batch's
        "_eod/merge_keys/tests.merge/o-00000001-abc/g1-attempt1",  # another generation's
        "_eod/merge_keys/tests.merge/o-00000001-abc/g2-",  # no attempt
        "_eod/merge_keys/tests.merge/o-00000001-abc",  # the batch's folder, every attempt
        f"{OWN}/deeper",
        "eod_data/tests.merge/o-00000001-abc/g2-attempt1",
        f"{OWN}\0",
        42,
        None,
    ],
)
def test_any_other_folder_is_refused(hostile: object) -> None:
    with pytest.raises(UnsafePathError):
        checked_digest_dir(hostile, BATCH, 2)


COLUMNS = ["id", "Op", "deleted_at", "is_deleted"]


@pytest.mark.parametrize(
    ("spark", "datafusion"),
    [
        ("op = 'D'", "\"Op\" = 'D'"),
        ('OP == "D"', "\"Op\" = 'D'"),
        ("is_deleted", '"is_deleted"'),
        (
            "`Op` IN ('D', 'X') or deleted_at is not null",
            "\"Op\" IN ( 'D' , 'X' ) OR \"deleted_at\" IS NOT NULL",
        ),
        ("NOT (op <> 'it''s')", "NOT ( \"Op\" <> 'it''s' )"),
    ],
)
def test_plain_predicates_are_run_as_spark_means_them(spark: str, datafusion: str) -> None:
    assert delete_sql(spark, COLUMNS) == f"COALESCE(CAST(({datafusion}) AS BOOLEAN), FALSE)"


@pytest.mark.parametrize(
    "text",
    [
        "upper(op) = 'D'",  # a function call
        "op = 'D'; COPY (SELECT 1) TO '/tmp/x'",  # a second statement
        "op IN (SELECT op FROM t)",  # a subquery
        "nope = 'D'",  # no such column
        "op = 'it\\'s'",  # a backslash escape (Spark's, not DataFusion's)
        "op = 'D' -- comment",
        "",
    ],
)
def test_anything_else_is_not_run(text: str) -> None:
    assert delete_sql(text, COLUMNS) is None
