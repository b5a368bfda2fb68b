"""Merge settings of the load operators, checked when the DAG is parsed (issue 22): settings
that do not fit together, columns the declared schema lacks, and templates in settings that
are not template fields are each a clear error when the operator is made, an import error
of the DAG in the UI, not a failed run."""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.operators.delta_load import BaseDeltaLoadOperator
from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

pytestmark = pytest.mark.merge

CDC = "id BIGINT, name STRING, amount BIGINT, seq BIGINT, op STRING"
MERGE = {"write_mode": "merge", "merge_keys": ["id"], "order_by": "seq"}


def _landing(**kwargs: Any) -> LandingFilesToDeltaOperator:
    args: dict[str, Any] = {
        "task_id": "load",
        "landing_path": "/landing",
        "table_uri": "/lake/cdc",
        "schema": CDC,
        **kwargs,
    }
    return LandingFilesToDeltaOperator(**args)


def _jdbc(**kwargs: Any) -> JdbcToDeltaOperator:
    args: dict[str, Any] = {
        "task_id": "load",
        "jdbc_conn_id": "pg",
        "source_table": "changes",
        "key_column": "lsn",
        "table_uri": "/lake/cdc",
        **kwargs,
    }
    return JdbcToDeltaOperator(**args)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"write_mode": "upsert"}, "write_mode must be one of append, merge, not 'upsert'"),
        ({"merge_keys": ["id"]}, "merge_keys is set but write_mode is 'append'"),
        ({"order_by": "seq", "delete_when": "op = 'D'"}, "order_by, delete_when is set but write_mode"),
        ({"keep_tombstones": False}, "keep_tombstones is set but write_mode is 'append'"),
        ({"write_mode": "merge", "order_by": "seq"}, "write_mode='merge' needs merge_keys"),
        ({"write_mode": "merge", "merge_keys": "id"}, "write_mode='merge' needs order_by"),
        ({**MERGE, "order_by": "id"}, "order_by 'id' is a merge key"),
        ({**MERGE, "merge_keys": ["id", "id"]}, "names a column twice"),
        ({**MERGE, "merge_keys": ["id; drop"]}, "is not a column name a merge can use"),
        ({**MERGE, "merge_keys": ["_eod_rank"]}, "not starting with '_eod_'"),
        ({**MERGE, "delete_when": "  "}, "delete_when must be a column name or a Spark SQL expression"),
        ({**MERGE, "keep_tombstones": "no"}, "keep_tombstones must be True or False, not 'no'"),
        ({**MERGE, "keep_tombstones": False}, "keep_tombstones=False removes the rows"),
        ({**MERGE, "merge_keys": ["ID"]}, "merge_keys/order_by ['ID'] are not columns of the schema"),
        ({**MERGE, "order_by": "lsn"}, "merge_keys/order_by ['lsn'] are not columns of the schema"),
        ({**MERGE, "merge_keys": ["{{ params.key }}"]}, "merge_keys cannot be templated"),
        ({**MERGE, "order_by": "{{ params.order }}"}, "order_by cannot be templated"),
        ({**MERGE, "delete_when": "op = '{{ params.op }}'"}, "delete_when cannot be templated"),
        ({**MERGE, "write_mode": "{{ params.mode }}"}, "write_mode cannot be templated"),
    ],
)
def test_a_bad_merge_setting_fails_when_the_operator_is_made(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        _landing(**kwargs)
    assert says in str(err.value)


def test_good_merge_settings_are_kept_and_are_not_template_fields() -> None:
    op = _landing(**MERGE, delete_when="op = 'D'", keep_tombstones=False)
    assert (op.write_mode, op.merge_keys, op.order_by) == ("merge", ["id"], "seq")
    assert (op.delete_when, op.keep_tombstones) == ("op = 'D'", False)
    single = _landing(write_mode="merge", merge_keys="id", order_by="seq")
    assert single.merge_keys == ["id"]
    merge_fields = {"write_mode", "merge_keys", "order_by", "delete_when", "keep_tombstones"}
    for cls in (BaseDeltaLoadOperator, LandingFilesToDeltaOperator, JdbcToDeltaOperator):
        assert not merge_fields & set(cls.template_fields), cls
    # A transform may add or rename columns: the schema is then not the table's.
    derived = _landing(**{**MERGE, "order_by": "changed_at"}, transform="mypkg.cdc:with_changed_at")
    assert derived.order_by == "changed_at"
    # A templated schema is checked when it is rendered, merge columns included.
    assert _landing(**MERGE, schema="{{ params.schema }}").merge_keys == ["id"]


def test_the_jdbc_operator_checks_merge_columns_against_its_columns() -> None:
    ok = _jdbc(**MERGE, columns=["lsn", "id", "seq", "op"], delete_when="op = 'D'")
    assert ok.merge_keys == ["id"]
    with pytest.raises(ConfigurationError, match=r"merge_keys/order_by \['seq'\] are not columns of columns"):
        _jdbc(**MERGE, columns=["lsn", "id", "op"])
    assert _jdbc(**MERGE).columns is None, "every column is read: nothing to check against"
    with pytest.raises(ConfigurationError, match="merge_keys is set but write_mode is 'append'"):
        _jdbc(merge_keys=["id"])


@pytest.mark.airflow
def test_a_bad_merge_combination_is_an_import_error_of_the_dag(airflow_db: str, tmp_path: Any) -> None:
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import DagBag  # type: ignore[no-redef]

    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "merge_typo.py").write_text(
        textwrap.dedent(
            """
            from datetime import datetime, timezone
            from airflow.sdk import DAG
            from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

            with DAG("eod_merge_typo", schedule=None, start_date=datetime(2026, 1, 1, tzinfo=timezone.utc)):
                LandingFilesToDeltaOperator(
                    task_id="load", landing_path="/landing", table_uri="/lake/t",
                    schema="id BIGINT, seq BIGINT, op STRING",
                    merge_keys=["id"], order_by="seq",  # write_mode='merge' forgotten
                )
            """
        )
    )
    bag = DagBag(dag_folder=str(dags), safe_mode=False)
    assert "eod_merge_typo" not in bag.dags
    ((where, error),) = bag.import_errors.items()
    assert os.path.basename(where) == "merge_typo.py"
    assert "merge_keys, order_by is set but write_mode is 'append', which ignores it" in error
