"""The table directory: open the Delta table in it, or refuse a directory that is not one."""

from __future__ import annotations

import os
import stat

from airflow_eod.core.delta.log import TableLog, read_log
from airflow_eod.core.errors import UnsupportedTableError
from airflow_eod.core.table_layout import DATA_DIR, META_DIR, under
from airflow_eod.core.table_ref import TableRef

# What airflow-eod itself may have put in a table directory before the first commit.
_OWN_ENTRIES = {META_DIR, DATA_DIR}


def open_table(ref: TableRef) -> TableLog | None:
    """The Delta table at ``ref``, or ``None`` when there is none yet.

    A ``_delta_log/`` with no commit in it (a writer died while creating the table, leaving
    only its temporary file) is no table yet: the next commit creates it. A directory that
    holds other things but no Delta log is refused: loading into it would mix our files with
    someone else's.
    """
    path = ref.path
    if ref.is_local:
        # A _delta_log that is a link out of the table (to another team's table) is refused
        # before it is read, or written: commits would land in the other table's log.
        under(path, "_delta_log")
    table = read_log(ref)
    if table is not None:
        return table
    if ref.is_local:
        # One stat, not "is it a directory?" then "does it exist?": a racer that creates the
        # table directory between two such checks made a first load fail with "is a file".
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(mode):
            raise UnsupportedTableError(f"{path} is a file, not a Delta table directory")
        entries = set(os.listdir(path))
    else:
        # A prefix is there when something is under it: no entries, no table yet.
        try:
            entries = {name.rstrip("/") for name in ref.storage().list("")}
        except NotADirectoryError:  # HDFS: a file at the table's root
            raise UnsupportedTableError(f"{path} is a file, not a Delta table directory") from None
    # Our plan log is written only into an empty directory or a table (load_flow.freeze
    # refuses any other first), and a _delta_log/ without a commit is a Delta writer's first
    # commit on its way: beside either, files are a Delta Spark first write that died or is
    # still running (it writes at the table's root), not another system's.
    claimed = META_DIR in entries or "_delta_log" in entries
    foreign = [] if claimed else sorted(entries - _OWN_ENTRIES)
    if foreign:
        raise UnsupportedTableError(
            f"{path} exists but is not a Delta table (it holds {', '.join(foreign[:5])}); "
            "point ref at an existing Delta table or at an empty or new directory"
        )
    return None
