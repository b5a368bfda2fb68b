"""The main job: run the example DAG end to end on the embedded default, with a crash.

It writes sample order files into a landing directory, runs ``eod_landing_files_example``
with ``dag.test()`` (SQLite metadata DB, local Spark, a local Delta table) and makes the
first attempt of the load die right after its commit. The retry must find the batch
committed and write nothing. It ends by printing the landing directory, the table, and
a summary checked row by row.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys

DAG_FILE = "eod_landing_files_example.py"
TASK_ID = "load_orders"


def _prepare_environment(workdir: str, dags_folder: str) -> tuple[str, str]:
    landing = os.path.join(workdir, "landing")
    table = os.path.join(workdir, "orders_delta")
    os.environ.update(
        AIRFLOW_HOME=os.path.join(workdir, "airflow_home"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=dags_folder,
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        EOD_DEMO_LANDING=landing,
        EOD_DEMO_TABLE=table,
        # The crash: the first try dies after its commit, before the task returns.
        EOD_FAULTPOINTS="after_commit=raise@1",
        # Fault points are test-only: the demo's crash needs the second switch as well.
        EOD_FAULTPOINTS_TESTING="1",
    )
    return landing, table


def _attempt_outcomes(run_id: str) -> list[str]:
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: list[tuple[int, str]] = []
    with create_session() as session:
        for h in session.scalars(
            select(TaskInstanceHistory).where(
                TaskInstanceHistory.run_id == run_id, TaskInstanceHistory.task_id == TASK_ID
            )
        ):
            out.append((h.try_number, f"try {h.try_number}: {h.state}"))
        ti = session.scalars(
            select(TaskInstance).where(TaskInstance.run_id == run_id, TaskInstance.task_id == TASK_ID)
        ).one()
        xcom = session.scalars(
            select(XComModel).where(
                XComModel.run_id == run_id, XComModel.task_id == TASK_ID, XComModel.key == "return_value"
            )
        ).first()
        value = xcom.value if xcom is not None else None
        outcome = value.get("outcome") if isinstance(value, dict) else None
        out.append((ti.try_number, f"try {ti.try_number}: {ti.state} ({outcome or 'no result'})"))
    return [text for _, text in sorted(out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=os.path.abspath(".demo"), help="where everything goes")
    parser.add_argument("--dags-folder", default=os.path.abspath("dags"))
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--rows-per-file", type=int, default=500)
    args = parser.parse_args(argv)

    shutil.rmtree(args.workdir, ignore_errors=True)
    landing, table = _prepare_environment(args.workdir, args.dags_folder)

    from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files

    source_rows = write_order_files(landing, args.files, args.rows_per_file)
    subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    spec = importlib.util.spec_from_file_location("eod_example_dag", os.path.join(args.dags_folder, DAG_FILE))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print(
        f"demo: the first try of {TASK_ID} crashes ON PURPOSE right after its commit "
        "(EOD_FAULTPOINTS=after_commit=raise@1): the InjectedFault traceback below is expected. "
        "Its retry asks the table, finds the batch, and writes nothing.",
        flush=True,
    )
    dag_run = module.dag.test()

    from airflow_eod.core.delta.table import open_table
    from airflow_eod.core.manifest import Manifest
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.examples.compare import compare_table_with_landing

    cmp = compare_table_with_landing(table, landing, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    delta = open_table(TableRef.parse(table))
    commits = []
    if delta is not None:
        for info in delta.snapshot().history():
            m = Manifest.from_user_metadata(info.get("userMetadata"))
            if m is not None:
                commits.append(f"v{info['version']} by try {m.try_number}")
    attempts = "; ".join(_attempt_outcomes(dag_run.run_id))
    print(f"source: {landing}")
    print(f"table: {table}")
    print(
        f"summary: dag run {dag_run.state}; source rows {source_rows}; table rows {cmp.table_rows}; "
        f"duplicates {len(cmp.duplicates)}; missing {len(cmp.missing)}; "
        f"commits [{', '.join(commits)}]; attempts [{attempts}]"
    )
    ok = cmp.exact and str(dag_run.state) == "success" and source_rows == cmp.source_rows
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
