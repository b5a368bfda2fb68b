"""What one reading of a Delta table's log opened, and how a reading gives up: the state
the log's readers (:mod:`airflow_eod.core.delta.log` and its helpers) share."""

from __future__ import annotations

import os
from dataclasses import dataclass

LOG_DIR = "_delta_log"


def log_key(path: str) -> str:
    """The storage key of the log file ``path`` (a path in ``_delta_log/``)."""
    return f"{LOG_DIR}/{os.path.basename(path)}"


@dataclass
class LogReadStats:
    """What one reading of the log opened: the shape test pins these, whatever the history."""

    commits_read: int = 0
    checkpoint_files_read: int = 0
    index_files_read: int = 0  # a checkpoint's index (checkpoint_index), instead of the checkpoint
    listed: bool = False
    fell_back: bool = False


class Unreadable(Exception):
    """This reader cannot take the log from here; fall back."""


class Overtaken(Exception):
    """A checkpoint newer than the commits read was announced while they were read."""


# Readings started again because a newer checkpoint overtook them, before falling back.
REREADS = 5
