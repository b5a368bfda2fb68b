"""Issue 18, items 22-24, 27, 28: hostile landing files, tables and connections.

Who attacks: someone who can write into a landing directory (an SFTP drop), someone who
controls a table's files (another team sharing the lake), someone who can edit an Airflow
connection. None may make the provider read, write or delete anything outside the table and
the landing directory, or leak a secret (invariant I11). Each test says what happened on
960f2aa, where it failed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import BatchError, ConfigurationError, EodError, UnsafePathError
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import read_delta_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import PIPELINE, check, orders_source, plan_for, spec_for

pytestmark = pytest.mark.security

CSV_HEADER = "order_id,customer,amount,order_date,ordered_at\n"
SECRET = "s3cret"


def _secret_file(where: str) -> str:
    """Another tenant's file, readable by the worker's user only, in the orders layout."""
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, "payroll.csv")
    with open(path, "w") as fh:
        rows = (f"{9000 + i},{SECRET}-{i},1.00,2026-11-01,2026-11-01T00:00:00Z\n" for i in range(3))
        fh.write(CSV_HEADER + "".join(rows))
    os.chmod(path, 0o600)
    return path


def _tree(root: str) -> list[str]:
    """Every entry below ``root`` (links not followed), for "nothing changed out there"."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(dirpath, n), root) for n in dirs + files]
    return sorted(out)


# -- item 22: a link in the landing directory --------------------------------------------------
@pytest.mark.spark
def test_a_link_in_the_landing_directory_is_never_input(
    spark: Any, landing: str, table: str, tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """On 960f2aa a symlink in the landing directory to a 0600 file of another tenant was
    planned (its realpath) and loaded: the tenant's rows became rows of the table. Now links
    (to a file outside, to a file inside, to a directory) and FIFOs are skipped with a
    warning naming them, and a planned file swapped for a link before the read is refused
    with UnsafePathError, nothing read and nothing committed."""
    write_order_files(landing, 2, 5)
    secret = _secret_file(str(tmp_path / "tenant"))
    os.symlink(secret, os.path.join(landing, "stolen.csv"))
    inside = sorted(n for n in os.listdir(landing) if n.endswith(".csv") and n != "stolen.csv")[0]
    os.symlink(os.path.join(landing, inside), os.path.join(landing, "again.csv"))
    os.symlink(os.path.dirname(secret), os.path.join(landing, "tenant_dir"))
    os.mkfifo(os.path.join(landing, "pipe.csv"))  # a read of it would block for ever
    caplog.set_level(logging.WARNING)
    plan = plan_for(orders_source(landing), table)
    names = sorted(os.path.basename(f["path"]) for f in plan.inputs)
    assert "stolen.csv" not in names and "again.csv" not in names and "pipe.csv" not in names, names
    assert len(names) == 2 and all(f["path"].startswith(os.path.realpath(landing)) for f in plan.inputs)
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "stolen.csv" in warned and "tenant_dir" in warned and "pipe.csv" in warned, warned
    run_load(spark, spec_for(orders_source(landing), table, plan))
    rows = read_delta_rows(table, ORDERS_COLUMNS)
    assert not any(SECRET in str(r) for r in rows), "another tenant's rows are in the table"
    cmp = check(table, landing)  # the checker skips links and FIFOs too
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()

    # A file planned as a regular file and swapped for a link before the read.
    os.remove(os.path.join(landing, "pipe.csv"))
    write_order_files(landing, 1, 4, first_id=500)
    second = plan_for(orders_source(landing), table, run="run-2")
    (planned,) = second.inputs
    st = os.stat(planned["path"])
    os.remove(planned["path"])
    os.symlink(secret, planned["path"])
    os.utime(planned["path"], ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    version = DeltaTable(table).version()
    refused = r"batch tests\.orders/o-.*resolves outside the landing directory.*not read"
    with pytest.raises(UnsafePathError, match=refused):
        run_load(spark, spec_for(orders_source(landing), table, second))
    assert DeltaTable(table).version() == version
    os.remove(planned["path"])
    write_order_files(landing, 1, 4, first_id=500)  # the delivery put back, as planned
    os.utime(planned["path"], ns=(st.st_atime_ns, st.st_mtime_ns))
    run_load(spark, spec_for(orders_source(landing), table, second))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 14, cmp.describe()


# -- item 23: a hostile metaData.id ------------------------------------------------------------
def _hostile_table(table: str, table_id: str) -> list[tuple[Any, ...]]:
    """A table another team created, with two rows, whose ``metaData.id`` is ``table_id``."""
    rows = [
        {"order_id": 1, "customer": "other", "amount": None, "order_date": None, "ordered_at": None},
        {"order_id": 2, "customer": "team", "amount": None, "order_date": None, "ordered_at": None},
    ]
    write_deltalake(table, pa.Table.from_pylist(rows, ORDERS_ARROW_SCHEMA))
    path = os.path.join(table, "_delta_log", f"{0:020d}.json")
    actions = [json.loads(line) for line in open(path)]
    for a in actions:
        if "metaData" in a:
            a["metaData"]["id"] = table_id
    with open(path, "w") as fh:
        fh.write("\n".join(json.dumps(a) for a in actions) + "\n")
    return read_delta_rows(table, ORDERS_COLUMNS)


@pytest.mark.spark
def test_a_hostile_table_id_is_refused_before_anything_is_written(
    spark: Any, landing: str, tmp_path: Any
) -> None:
    """On 960f2aa a table whose ``metaData.id`` is ``a/../../../../../../../escaped`` took a
    normal load, and the commit record was written by that name: to ``escaped.json`` beside
    the table, outside it. Now the id is checked before the commit: UnsafePathError naming the
    batch, the table as it was, nothing written outside."""
    table = str(tmp_path / "lake" / "orders")
    before = _hostile_table(table, "a/../../../../../../../escaped")
    write_order_files(landing, 1, 5)
    plan = plan_for(orders_source(landing), table)
    outside = _tree(str(tmp_path / "lake"))
    with pytest.raises(UnsafePathError, match=r"batch tests\.orders/o-.*table id \(metaData\.id\)"):
        run_load(spark, spec_for(orders_source(landing), table, plan))
    assert not os.path.exists(tmp_path / "lake" / "escaped.json")
    assert not any(p.startswith("escaped") for p in os.listdir(tmp_path / "lake"))
    assert _tree(str(tmp_path / "lake")) == outside
    assert DeltaTable(table).version() == 0
    assert read_delta_rows(table, ORDERS_COLUMNS) == before  # row by row: the other team's two rows
    with pytest.raises(UnsafePathError):
        ask(TableRef.parse(table), plan.key)  # the ask says so too (CLI, sensor), and reads nothing out there


# -- item 24: cleanup and a linked batch directory ---------------------------------------------
@pytest.mark.spark
def test_cleanup_and_staging_never_follow_a_linked_batch_directory_out_of_the_table(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    """On 960f2aa cleanup listed a batch directory that was a link to another directory and
    removed its ``g<gen>-*`` directories (another team's data), and a load staged its files
    through such a link, outside the table. Now neither follows a link: cleanup leaves the
    target alone (a warning), staging is refused with UnsafePathError, nothing written."""
    from airflow_eod.core.cleanup import remove_uncommitted_attempts
    from airflow_eod.core.table_layout import batch_dir

    write_order_files(landing, 1, 5)
    plan = plan_for(orders_source(landing), table)
    run_load(spark, spec_for(orders_source(landing), table, plan))
    real = os.path.join(table, batch_dir(plan.key))
    victim = str(tmp_path / "victim")
    shutil.move(real, victim)  # the committed attempt's files now live behind a link
    os.symlink(victim, real)
    os.makedirs(os.path.join(victim, "g0-precious"))
    with open(os.path.join(victim, "g0-precious", "keep.txt"), "w") as fh:
        fh.write("another team's data")
    status = ask(TableRef.parse(table), plan.key)
    assert status.committed
    assert remove_uncommitted_attempts(TableRef.parse(table), status) == []
    assert os.path.exists(os.path.join(victim, "g0-precious", "keep.txt"))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 5, cmp.describe()

    # A link named like an attempt inside a real batch directory goes, its target stays.
    os.remove(real)
    shutil.move(victim, real)
    shutil.rmtree(os.path.join(real, "g0-precious"))
    elsewhere = str(tmp_path / "elsewhere")
    os.makedirs(os.path.join(elsewhere, "data"))
    os.symlink(elsewhere, os.path.join(real, "g0-link"))
    remove_uncommitted_attempts(TableRef.parse(table), ask(TableRef.parse(table), plan.key))
    assert os.path.isdir(os.path.join(elsewhere, "data"))
    assert not os.path.lexists(os.path.join(real, "g0-link"))

    # Staging a new batch whose directory a link sends elsewhere.
    write_order_files(landing, 1, 3, first_id=700)
    second = plan_for(orders_source(landing), table, run="run-2")
    drop = str(tmp_path / "drop")
    os.makedirs(drop)
    link = os.path.join(table, batch_dir(second.key))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(drop, link)
    with pytest.raises(UnsafePathError, match=r"batch tests\.orders/o-.*outside"):
        run_load(spark, spec_for(orders_source(landing), table, second))
    assert os.listdir(drop) == []
    os.remove(link)
    run_load(spark, spec_for(orders_source(landing), table, second))
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 8, cmp.describe()


# -- item 27: credentials in a JDBC URL --------------------------------------------------------
CREDENTIAL_URLS = [
    f"jdbc:mysql://root:{SECRET}@db/shop",
    f"jdbc:oracle:thin:scott/{SECRET}@db:1521/X",
    f"jdbc:sqlserver://db:1433;databaseName=shop;UID=admin;PWD={SECRET}",
    f"jdbc:sqlserver://db:1433;user=sa;password={SECRET}",
    f"jdbc:db2://db:50000/SHOP:user=u;password={SECRET};",
    f"jdbc:postgresql://db/shop?user=u&password={SECRET}",
    f"jdbc:postgresql://db/shop?sslmode=require&PassWord={SECRET}",
    f"jdbc:postgresql://db/shop?pass%77ord={SECRET}",
    f"jdbc:mysql://address=(host=db)(user=root)(password={SECRET})/shop",
    f"jdbc:derby:memory:x;user=a;pwd={SECRET}",
    f"jdbc:postgresql://db/shop?sslpassword={SECRET}",
    "jdbc:postgresql://loader@db/shop",
]


@pytest.mark.parametrize("url", CREDENTIAL_URLS)
def test_a_jdbc_url_with_credentials_in_any_driver_form_is_refused_without_echoing_it(url: str) -> None:
    """On 960f2aa only ``user=``/``password=`` were refused: userinfo, Oracle's
    ``user/password@``, ``;UID=;PWD=`` and the rest were accepted, then kept in the plan log
    and the spec, and echoed by errors. Now every form is refused, the error does not show
    the URL, and ``redact_jdbc_url`` masks the secret for any message that shows one."""
    from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
    from airflow_eod.sources.jdbc_url import redact_jdbc_url

    with pytest.raises(ConfigurationError, match="must not carry user or password") as info:
        JdbcIncrementalSource(url=url, table="orders", key_column="id")
    assert SECRET not in str(info.value)
    assert SECRET not in redact_jdbc_url(url) and "***" in redact_jdbc_url(url)


def test_urls_without_credentials_still_work_and_a_bad_prefix_is_not_echoed() -> None:
    from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
    from airflow_eod.sources.jdbc_url import redact_jdbc_url

    for url in (
        "jdbc:postgresql://db:5432/shop?sslmode=require&ApplicationName=eod",
        "jdbc:oracle:thin:@//db:1521/svc",
        "jdbc:sqlserver://db:1433;databaseName=shop;encrypt=true",
        "jdbc:postgresql://[::1]:5432/shop",
    ):
        assert JdbcIncrementalSource(url=url, table="orders", key_column="id").url == url
        assert redact_jdbc_url(url) == url
    with pytest.raises(ConfigurationError) as info:
        JdbcIncrementalSource(url=f"scott/{SECRET}@db", table="orders", key_column="id")
    assert SECRET not in str(info.value)  # on 960f2aa: "must start with 'jdbc:', not 'scott/s3cret@db'"


@pytest.mark.airflow
def test_a_connection_whose_url_carries_credentials_is_refused_without_echoing_it(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``jdbc`` connection whose host is ``jdbc:mysql://root:s3cret@db/shop`` was accepted on
    960f2aa (and the URL went into the plan log and the spec). Now it is refused, and the
    error does not show the URL."""
    from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

    monkeypatch.setenv(
        "AIRFLOW_CONN_SEC_MYSQL",
        json.dumps({"conn_type": "jdbc", "host": f"jdbc:mysql://root:{SECRET}@db/shop", "login": "u"}),
    )
    op = JdbcToDeltaOperator(
        task_id="load", jdbc_conn_id="sec_mysql", source_table="orders", key_column="id",
        table_uri=str(tmp_path / "t"), pipeline_id="sec.mysql",
    )  # fmt: skip
    with pytest.raises(ConfigurationError) as info:
        op.build_source()
    assert SECRET not in str(info.value)


@pytest.mark.airflow
def test_submit_specs_and_driver_errors_are_written_0600(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, landing: str
) -> None:
    """On 960f2aa the submit spec ``<table>/_eod/specs/<attempt>.json`` (the source's URL,
    table and layout) and the driver's ``.error.json`` were written with the umask's mode
    (0644): readable by every user of a shared lake. Now both are 0600."""
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
    from airflow_eod.spark import driver

    # Submit mode, with a spark-submit that records the spec's mode and fails.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "spark-submit"
    fake.write_text(
        '#!/bin/sh\nwhile [ "$#" -gt 0 ]; do\n'
        '  if [ "$1" = "--spec" ]; then stat -c %a "$2" > "$EOD_SEC_MODE"; fi\n'
        "  shift\ndone\nexit 3\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    mode_file = tmp_path / "mode.txt"
    monkeypatch.setenv("EOD_SEC_MODE", str(mode_file))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SEC_SPARK",
        json.dumps({"conn_type": "spark", "host": "local[1]", "extra": {"deploy-mode": "client"}}),
    )
    write_order_files(landing, 1, 3)
    loader = LandingFilesToDeltaOperator(
        task_id="load", execution="submit", spark_conn_id="sec_spark", landing_path=landing,
        table_uri=str(tmp_path / "table"), pipeline_id="sec.spec", file_format="csv",
        schema="order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP",
    )  # fmt: skip
    ti = SimpleNamespace(dag_id="sec", task_id="load", run_id="run-1", map_index=-1, try_number=1)
    with pytest.raises(BatchError):
        loader.execute({"ti": ti})
    assert mode_file.read_text().strip() == "600", f"the spec was written {mode_file.read_text().strip()}"
    spec_path = str(tmp_path / "spec.json")
    driver.write_error(spec_path, BatchError("p/k", "boom"))
    assert stat.S_IMODE(os.stat(driver.error_path(spec_path)).st_mode) == 0o600


# -- item 28: the driver class from a connection -----------------------------------------------
@pytest.mark.airflow
def test_a_driver_class_from_the_connection_needs_the_jdbc_providers_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On 960f2aa ``extra.driver_class`` (or ``extra.driver``) of the connection was the class
    the JVM loaded, unconditionally: whoever can edit a connection chose any class the JVM
    has (Derby's embedded driver creates files anywhere the worker can write). Now, as in
    Airflow's JDBC provider, only with ``[providers.jdbc] allow_driver_class_in_extra``;
    otherwise the operator's ``driver`` (or the default), and an error naming the setting."""
    from airflow_eod.hooks.jdbc_source import JdbcSourceHook
    from airflow_eod.operators.jdbc_to_delta import JdbcToDeltaOperator

    monkeypatch.delenv("AIRFLOW__PROVIDERS_JDBC__ALLOW_DRIVER_CLASS_IN_EXTRA", raising=False)
    derby = "org.apache.derby.jdbc.EmbeddedDriver"
    for key in ("driver_class", "driver", "Driver_Class"):
        monkeypatch.setenv(
            "AIRFLOW_CONN_SEC_DERBY",
            json.dumps({
                "conn_type": "postgres", "host": "db", "schema": "shop", "login": "u",
                "extra": {key: derby, "driver_path": "/tmp/evil.jar"},
            }),
        )  # fmt: skip
        with pytest.raises(ConfigurationError, match=r"\[providers\.jdbc\] allow_driver_class_in_extra"):
            _ = JdbcSourceHook(jdbc_conn_id="sec_derby").driver
    # The DAG's own choice is used, and a connection that names the same class is fine.
    assert JdbcSourceHook(jdbc_conn_id="sec_derby", driver=derby).driver == derby
    monkeypatch.setenv(
        "AIRFLOW_CONN_SEC_PG",
        json.dumps({"conn_type": "postgres", "host": "db", "schema": "shop", "login": "u"}),
    )
    op = JdbcToDeltaOperator(
        task_id="load", jdbc_conn_id="sec_pg", source_table="orders", key_column="id",
        table_uri="/tmp/unused-sec", pipeline_id="sec.pg", driver="org.example.Driver",
    )  # fmt: skip
    assert op.build_source().driver == "org.example.Driver"
    assert JdbcSourceHook(jdbc_conn_id="sec_pg").driver == "org.postgresql.Driver"
    monkeypatch.setenv("AIRFLOW__PROVIDERS_JDBC__ALLOW_DRIVER_CLASS_IN_EXTRA", "True")
    assert JdbcSourceHook(jdbc_conn_id="sec_derby").driver == derby


# -- the sweep: every path built from table or landing content ---------------------------------
GOOD_NAME = "o-00000001-0123456789ab"
HOSTILE_NAMES = [
    GOOD_NAME, "..", ".", "../x", "a/../../x", "/etc/passwd", "/tmp", "x\0y", "", ".hidden", "-x", "a/b",
]  # fmt: skip


def _refused_or_inside(call: Any, root: str) -> None:
    """``call()`` is refused (UnsafePathError, or the id check's ConfigurationError), or what
    it returns, if a path, resolves under ``root``."""
    try:
        result = call()
    except (UnsafePathError, ConfigurationError):
        return
    if isinstance(result, str) and os.sep in result:
        real = os.path.realpath(result if os.path.isabs(result) else os.path.join(root, result))
        assert real.startswith(os.path.realpath(root) + os.sep), f"{result!r} resolves outside {root}"


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=repr)
def test_every_path_built_from_table_content_refuses_hostile_names(name: str, tmp_path: Any) -> None:
    """Every function that builds a path from a value read from a table, a plan log or a
    spec (batch keys, pipeline ids, table ids, attempt ids, generations) refuses ``..``,
    absolute paths, ``a/../../x``, NUL, separators, or resolves inside the table; and none
    writes outside it. On 960f2aa the table id and attempt id went into paths unchecked."""
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.table_layout import attempt_dir, batch_dir, path_part, under
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.spark.load_spec import LoadSpec

    lake = str(tmp_path / "lake")
    table = os.path.join(lake, "t")
    os.makedirs(table)
    key = BatchKey(PIPELINE, "i-20261110T000000Z-20261111T000000Z")
    log = PlanLog(TableRef.parse(table), PIPELINE)
    records = RecordStore(plan_log=log)
    calls = [
        lambda: path_part(name),
        lambda: under(table, name),
        lambda: under(table, "_eod", name, "x.json"),
        lambda: batch_dir(BatchKey(PIPELINE, name)),
        lambda: batch_dir(BatchKey(name, "k")),
        lambda: attempt_dir(key, 0, name),
        lambda: TableRef.parse(table).dir(attempt_dir(key, 0, name)),
        lambda: log.get_plan(name),
        lambda: log.get_plan(name, 1),
        lambda: records.record_dir(name),
        lambda: records.commit_record_path(key.key, 0, name),
        lambda: records.commit_record_path(name, 0, "id"),
        lambda: records.commit_record(key.key, 0, name),
        lambda: records.newest_commit_record(key.key, name),
        lambda: records.newest_commit_record(name, "id"),
        lambda: records.put_commit_record(key.key, 0, name, {"x": 1}),
        lambda: records.put_commit_record(name, 0, "id", {"x": 1}),
        lambda: PlanLog(TableRef.parse(table), name).root,
        lambda: BatchKey.from_app_id(f"eod:{PIPELINE}:{name}"),
        lambda: LoadSpec(
            table=TableRef.parse(table), plan=_any_plan(), source=orders_source(lake), attempt_id=name
        ),
    ]
    for call in calls:
        if name == GOOD_NAME:
            call()  # the control: a name airflow-eod writes is never refused
        else:
            _refused_or_inside(call, table)
    assert sorted(os.listdir(lake)) == ["t"], f"something was written outside the table: {os.listdir(lake)}"
    if name == GOOD_NAME:
        assert os.path.exists(records.commit_record_path(key.key, 0, name))


def _any_plan() -> Any:
    from airflow_eod.core.planlog.store import Plan

    return Plan(PIPELINE, "i-20261110T000000Z-20261111T000000Z", "interval", {}, [])


def test_links_inside_a_table_never_lead_reads_writes_or_removals_out_of_it(tmp_path: Any) -> None:
    """Links planted in a table's own directories (``_eod``, the plan log's ``batches``,
    ``_eod/checkpoints``, a batch directory): every reader, writer and remover refuses them
    or stays inside, and the directories they point at are left exactly as they were. On
    960f2aa each of these was followed."""
    from airflow_eod.core.ask import BatchStatus
    from airflow_eod.core.audit.facts import read_plan_log_facts
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.cleanup import remove_uncommitted_attempts
    from airflow_eod.core.delta import checkpoint_index
    from airflow_eod.core.delta.binding import bound_table_id, check_table_identity
    from airflow_eod.core.manifest import Manifest
    from airflow_eod.core.table_layout import batch_dir

    outside = str(tmp_path / "outside")
    os.makedirs(os.path.join(outside, "g0-precious"))
    with open(os.path.join(outside, "table.json"), "w") as fh:
        fh.write('{"table_id": "theirs"}')
    os.makedirs(os.path.join(outside, "00000000000000000001.old"))
    before = _tree(outside)
    key = BatchKey(PIPELINE, "i-20261110T000000Z-20261111T000000Z")

    def fresh(name: str) -> str:
        table = str(tmp_path / name)
        write_deltalake(table, pa.Table.from_pylist([], ORDERS_ARROW_SCHEMA))
        return table

    # _eod itself is a link.
    t1 = fresh("t1")
    os.symlink(outside, os.path.join(t1, "_eod"))
    for call in (
        lambda: bound_table_id(TableRef.parse(t1)),
        lambda: check_table_identity(TableRef.parse(t1), "mine"),
        lambda: PlanLog(TableRef.parse(t1), PIPELINE).get_plan(key.key),
        lambda: RecordStore(plan_log=PlanLog(TableRef.parse(t1), PIPELINE)).put_commit_record(
            key.key, 0, "id", {"x": 1}
        ),
        lambda: ask(TableRef.parse(t1), key),
    ):
        with pytest.raises(UnsafePathError):
            call()
    # The plan log's batches/ is a link: status reports skip it, verify reports it.
    t2 = fresh("t2")
    os.makedirs(os.path.join(t2, "_eod", "pipelines", PIPELINE))
    os.symlink(outside, os.path.join(t2, "_eod", "pipelines", PIPELINE, "batches"))
    with pytest.raises(UnsafePathError):
        RecordStore(plan_log=PlanLog(TableRef.parse(t2), PIPELINE)).recorded_batches()
    facts = read_plan_log_facts(TableRef.parse(t2), "id")
    assert facts.unreadable and "outside" in facts.unreadable[0][1]
    # _eod/checkpoints is a link: the index is neither read there nor written or pruned there.
    t3 = fresh("t3")
    os.makedirs(os.path.join(t3, "_eod"))
    os.symlink(outside, os.path.join(t3, "_eod", "checkpoints"))
    log_file = os.path.join(t3, "_delta_log", f"{0:020d}.json")
    assert checkpoint_index.read_index(TableRef.parse(t3), 0, [log_file]) is None
    checkpoint_index.index_after_checkpoint(
        TableRef.parse(t3), 0, [log_file], lambda files: ({"metaData": {}}, {})
    )
    # A batch directory is a link: cleanup lists nothing there.
    t4 = fresh("t4")
    link = os.path.join(t4, batch_dir(key))
    os.makedirs(os.path.dirname(link))
    os.symlink(outside, link)
    manifest = Manifest(PIPELINE, key.key, 0, {}, "f", 0, 0, "a" * 16, engine="delta-rs")
    status = BatchStatus(key, 0, 0, 1, manifest, 1)
    assert remove_uncommitted_attempts(TableRef.parse(t4), status) == []
    assert _tree(outside) == before
    # A commit whose manifest names a hostile attempt id: cleanup keeps everything, and says so
    # (raising would fail every try of a batch that is committed).
    os.remove(link)
    os.makedirs(os.path.join(link, "g0-other"))
    bad = Manifest(PIPELINE, key.key, 0, {}, "f", 0, 0, "../../x", engine="delta-rs")
    hostile = BatchStatus(key, 0, 0, 1, bad, 1)
    assert remove_uncommitted_attempts(TableRef.parse(t4), hostile) == []
    assert os.path.isdir(os.path.join(link, "g0-other"))
    # _delta_log is a link to another team's table log: neither read nor committed to.
    theirs = fresh("theirs")
    t6 = str(tmp_path / "t6")
    os.makedirs(t6)
    os.symlink(os.path.join(theirs, "_delta_log"), os.path.join(t6, "_delta_log"))
    their_log = _tree(theirs)
    with pytest.raises(UnsafePathError, match="_delta_log"):
        ask(TableRef.parse(t6), key)
    assert _tree(theirs) == their_log
    # The control: a table_uri that is itself a link (a mount point) is the table's root,
    # resolved once: its plan log is read and written as usual.
    t5 = fresh("t5")
    os.symlink(t5, str(tmp_path / "t5-link"))
    via = RecordStore(plan_log=PlanLog(TableRef.parse(str(tmp_path / "t5-link")), PIPELINE))
    via.put_commit_record(key.key, 0, "id", {"x": 1})
    assert via.commit_record(key.key, 0, "id") == {"x": 1}
    assert bound_table_id(TableRef.parse(str(tmp_path / "t5-link"))) == str(DeltaTable(t5).metadata().id)


@pytest.mark.parametrize(
    "hostile",
    ["dotdot", "absolute", "a/../../x", "nul", "link_out", "link_in", "dir_link", "fifo"],
)
def test_a_planned_landing_path_from_the_plan_log_is_read_only_inside_the_landing_root(
    hostile: str, landing: str, tmp_path: Any
) -> None:
    """A plan's input paths come from the plan log, which whoever controls the table's files
    can rewrite (its checksum is no signature). On 960f2aa a planned ``/etc/...``-style path,
    ``landing/../x`` or a link was stat'ed and handed to Spark. Now a path that is not a
    regular file, not a link, below the landing root is refused (UnsafePathError, nothing
    read); a name inside the root resolves inside."""
    from airflow_eod.core.planlog.store import Plan

    write_order_files(landing, 1, 2)
    real = os.path.join(landing, sorted(os.listdir(landing))[0])
    secret = _secret_file(str(tmp_path / "tenant"))
    paths = {
        "dotdot": os.path.join(landing, "..", "tenant", "payroll.csv"),
        "absolute": secret,
        "a/../../x": os.path.join(landing, "a", "..", "..", "tenant", "payroll.csv"),
        "nul": real + "\0.csv",
    }
    if hostile in paths:
        path = paths[hostile]
    else:
        path = os.path.join(landing, "planted.csv")
        if hostile == "link_out":
            os.symlink(secret, path)
        elif hostile == "link_in":
            os.symlink(real, path)
        elif hostile == "dir_link":
            os.symlink(os.path.dirname(secret), os.path.join(landing, "sub"))
            path = os.path.join(landing, "sub", "payroll.csv")
        else:
            os.mkfifo(path)
    size, mtime = (os.stat(secret).st_size, os.stat(secret).st_mtime_ns)
    inputs = [{"path": path, "size": size, "mtime_ns": mtime}]
    plan = Plan(
        PIPELINE, "o-00000000-000000000000", "offsets", {"directory": landing}, inputs,
        seq=0, source={"type": "landing_files"},
    )  # fmt: skip
    source = orders_source(landing)
    with pytest.raises(UnsafePathError, match=r"batch tests\.orders/o-00000000-000000000000"):
        source.verify(plan)
    # A re-freeze of a batch never committed leaves it out; of a committed one, refuses.
    refrozen = source.replan(plan, 1, committed=False)
    assert refrozen.inputs == []
    with pytest.raises(EodError):
        source.replan(plan, 1, committed=True)
    assert all(f["path"] != path for f in source.list_files())


def test_a_driver_that_refuses_the_url_is_told_without_its_secrets() -> None:
    """Issue 18 (adversary 2, defect 6): ``JDBC driver ... does not accept the URL`` echoed
    ``self.url`` unredacted. What the check lets through is not all a message may show:
    ``scott/s3cret@`` after a driver prefix the check does not know is masked by the
    redaction. A driver (here a stand-in for the JVM's) that returns no connection must
    yield a message without the secret."""
    from types import SimpleNamespace

    from airflow_eod.core.source import Credentials, ReadContext
    from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource

    url = f"jdbc:acme:scott/{SECRET}@db:5000/shop"
    source = JdbcIncrementalSource(url=url, table="orders", key_column="id", driver="com.acme.Driver")
    refusing = SimpleNamespace(connect=lambda url, props: None)
    classes = SimpleNamespace(classForName=lambda *a: SimpleNamespace(newInstance=lambda: refusing))
    spark_util = SimpleNamespace(util=SimpleNamespace(Utils=classes))
    properties = SimpleNamespace(setProperty=lambda k, v: None)
    jvm = SimpleNamespace(
        org=SimpleNamespace(apache=SimpleNamespace(spark=spark_util)),
        java=SimpleNamespace(util=SimpleNamespace(Properties=lambda: properties)),
    )
    ctx = ReadContext(spark_factory=lambda: SimpleNamespace(_jvm=jvm), credentials=Credentials("u", "p"))
    with pytest.raises(ConfigurationError, match="does not accept the URL") as info:
        source._connected(ctx, None, lambda jvm, conn: None)
    assert SECRET not in str(info.value) and "***" in str(info.value)
