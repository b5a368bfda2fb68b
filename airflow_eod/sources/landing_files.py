"""The landing-files source: a directory of CSV, JSON or Parquet files.

With ``boundary="offsets"`` a batch is the frozen list of files (path, size, mtime) that
no earlier batch of the pipeline holds, oldest first, capped by a number of files or
bytes. Loaded files are tracked as a set, not as a max-mtime watermark, so a late file
with an old mtime is still loaded once. With ``boundary="interval"`` a batch is every file
in the (usually templated) directory when the DAG run's interval is first planned.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import re
import stat
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import BatchError, ConfigurationError, InputChangedError, UnsafePathError
from airflow_eod.core.options import BOUNDARIES, FORMATS, choice
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_interval_batch, plan_offset_batch, require_interval
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.landing_store import StoreLanding, check_landing_scheme, is_store_path, store_root

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from collections.abc import Set as AbstractSet


log = logging.getLogger(__name__)

# Spark's defaults make malformed CSV/JSON rows silently null. With a schema, records are
# read PERMISSIVE into a corrupt-record column and counted (spark/bad_records.py); without
# one there is no such column, so the read fails on the first malformed record instead.
DEFAULT_READ_OPTIONS: dict[str, dict[str, str]] = {
    "csv": {"header": "true", "mode": "FAILFAST"},
    "json": {"mode": "FAILFAST"},
    "parquet": {},
}


def _canonical(path: str, plan: Plan) -> str:
    """A loaded file's canonical path. Plans with a ``source`` were listed canonically; older
    ones kept the path as given, which may run through a symlink."""
    return path if plan.source or is_store_path(path) else os.path.realpath(path)


def _fingerprint(entry: dict[str, Any], directory: str) -> tuple[Any, ...]:
    """What tells a planned file apart from another in a directory: its relative path, its
    size, and its mtime (locally) or its ETag (on an object store)."""
    path = entry["path"]
    if is_store_path(directory):
        rel = path[len(directory) + 1 :] if path.startswith(directory + "/") else path
    else:
        rel = os.path.relpath(path, directory)
    return (rel, entry["size"], entry.get("mtime_ns"), entry.get("etag"))


@dataclass(frozen=True)
class LandingFilesSource:
    """A landing directory of files.

    :param path: the landing directory: a local path, or a prefix on an object store
        (``s3://bucket/prefix``, ``az://``, ``abfss://``, ``gs://``).
    :param file_format: ``csv``, ``json`` or ``parquet``.
    :param schema: the Spark DDL schema of the files (recommended: an inferred schema may
        differ between batches and then fails the schema check).
    :param read_options: Spark reader options, on top of the defaults.
    :param pattern: a glob on file names; files starting with ``_`` or ``.`` are never read.
    :param boundary: ``offsets`` or ``interval``.
    :param max_files_per_batch: cap on files per offset batch.
    :param max_bytes_per_batch: cap on bytes per offset batch (a single larger file still
        makes a batch of its own).
    :param storage_options: for a landing prefix on an object store, its storage options
        (delta-rs names, credentials among them). Held in memory only: never in
        :meth:`to_dict`, a plan, a spec or a log line.
    """

    path: str
    file_format: str = "csv"
    schema: str | None = None
    read_options: dict[str, str] = field(default_factory=dict)
    pattern: str = "*"
    boundary: str = "offsets"
    max_files_per_batch: int | None = None
    max_bytes_per_batch: int | None = None
    storage_options: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    # The source's kind: its ``type`` in ``to_dict`` and in the registry of sources and
    # readers (airflow_eod.spark.readers).
    kind: ClassVar[str] = "landing_files"

    def __post_init__(self) -> None:
        check_landing_scheme(self.path)
        choice("file_format", self.file_format, FORMATS)
        choice("boundary", self.boundary, BOUNDARIES)
        for name in ("max_files_per_batch", "max_bytes_per_batch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"{name} must be at least 1, not {value}")

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        del body["storage_options"]  # secrets: never serialized
        return {"type": self.kind, **body}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LandingFilesSource:
        body = {k: v for k, v in data.items() if k != "type"}
        return cls(**body)

    # -- planning (no Spark) -----------------------------------------------------
    @property
    def on_store(self) -> bool:
        """Whether the landing directory is a prefix on an object store."""
        return is_store_path(self.path)

    @property
    def root(self) -> str:
        """The landing directory's canonical path (symlinks resolved), or its prefix's one
        spelling on an object store."""
        return store_root(self.path) if self.on_store else os.path.realpath(self.path)

    def store(self) -> StoreLanding:
        """The landing prefix on its object store (with the storage options in memory)."""
        return StoreLanding(self.root, dict(self.storage_options or {}))

    def identity(self) -> dict[str, Any]:
        """What decides the slice: a stored plan is reused only by the same source."""
        return {
            "type": self.kind,
            "path": self.root,
            "pattern": self.pattern,
            "boundary": self.boundary,
        }

    def list_files(
        self,
        label: str | None = None,
        *,
        skip: AbstractSet[str] = frozenset(),
        exclude: Sequence[str] = (),
        required: bool = False,
    ) -> list[dict[str, Any]]:
        """Every candidate file now, oldest first (mtime, then path), except those in ``skip``.

        A file is identified by its canonical path, and a file moved or copied to another
        path is a new one (as in Auto Loader and COPY INTO). Files in ``skip`` (loaded
        already) are not even stat'ed: a landing directory that keeps its old files costs a
        directory read per planning, not a stat per file ever delivered.

        Links are never followed (invariant I11): a symlink, to a file or a directory, inside
        or outside the landing directory, is not input, and neither is anything but a regular
        file (a FIFO would block the read for ever). Each is skipped with a warning naming it,
        rather than failing the batch: whoever can drop a file into the directory could
        otherwise stop the pipeline with one link.

        A Delta table is never input either: a folder holding ``_delta_log`` and the roots in
        ``exclude`` (the table loaded from here, before its first commit) are not entered, so a
        table placed below its own landing directory does not load its own files again.

        On an object store the prefix is listed instead (:mod:`airflow_eod.sources.landing_store`):
        files are fingerprinted by size and ETag, oldest first by their ``Last-Modified``.

        :param label: the batch (or the pipeline), for errors and warnings.
        :param skip: the paths loaded already.
        :param exclude: the roots of the tables loaded from this directory; a landing
            directory at or inside one is refused.
        :param required: on an object store, a prefix holding no object is a missing source
            (a local directory that does not exist always is).
        """
        if self.on_store:
            return self.store().list_files(self.pattern, label, skip=skip, exclude=exclude, required=required)
        root = self.root
        if not os.path.isdir(root):
            raise BatchError(label, f"landing directory {root} does not exist (a missing source)")
        tables = {os.path.realpath(t) for t in exclude if "://" not in t}
        for table in tables:
            if root == table or root.startswith(table.rstrip(os.sep) + os.sep):
                raise ConfigurationError(
                    f"{f'batch {label}: ' if label else ''}landing directory {root} lies inside the table "
                    f"{table}: a table's files are never landing input; land the files elsewhere"
                )
        found: dict[str, dict[str, Any]] = {}
        passed: list[str] = []  # links and special files: never input
        matches = re.compile(fnmatch.translate(self.pattern)).match  # one compile, not one per name
        pending = [root]
        while pending:
            folder = pending.pop()
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):  # removed while listing
                continue
            if any(e.name == "_delta_log" for e in entries):
                if folder == root:
                    raise ConfigurationError(
                        f"landing directory {root} is the root of a Delta table (it holds _delta_log): "
                        "a table's data files are never landing input; point landing_path at the files"
                    )
                continue  # a Delta table's files: never input
            for entry in entries:
                if entry.name.startswith(("_", ".")):
                    continue
                try:
                    link = entry.is_symlink()
                    is_dir = not link and entry.is_dir(follow_symlinks=False)
                    is_file = not link and entry.is_file(follow_symlinks=False)
                except OSError:  # removed while listing
                    continue
                if is_dir:
                    if entry.path not in tables:
                        pending.append(entry.path)
                    continue
                if not is_file:
                    if link or matches(entry.name):
                        passed.append(entry.path)
                    continue
                if not matches(entry.name):
                    continue
                full = entry.path  # below a canonical root, and no link on the way
                if full in skip or full in found:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed while listing
                    continue
                found[full] = {"path": full, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if passed:
            passed.sort()
            log.warning(
                "%slanding directory %s holds %d link(s) or special file(s), which are never read: %s%s. "
                "Deliver regular files (a link is not input)",
                f"batch {label}: " if label else "",
                root,
                len(passed),
                ", ".join(passed[:5]),
                " ..." if len(passed) > 5 else "",
            )
        return sorted(found.values(), key=lambda f: (f["mtime_ns"], f["path"]))

    def _next_offsets(
        self, history: OffsetHistory, *, label: str | None = None, exclude: Sequence[str] = ()
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The next offset batch's boundary and files; ``None`` when nothing is new.

        :param label: names the pipeline in errors (the batch has no key yet).
        :param exclude: the table's root, never input.
        """
        self._refuse_remounted(history)
        loaded = history.loaded(lambda plan: [_canonical(f["path"], plan) for f in plan.inputs])
        batch: list[dict[str, Any]] = []
        total = 0
        # A prefix on a store that never held an object is a missing source (a typo, or the
        # files have not arrived); once the pipeline has loaded files, an emptied prefix (its
        # files removed after loading) is only "nothing new".
        required = history.newest_seq is None
        for entry in self.list_files(label, skip=loaded, exclude=exclude, required=required):
            if batch and self.max_files_per_batch and len(batch) >= self.max_files_per_batch:
                break
            if batch and self.max_bytes_per_batch and total + entry["size"] > self.max_bytes_per_batch:
                break
            batch.append(entry)
            total += entry["size"]
        if not batch:
            return None
        return {"directory": self.root, "files": len(batch), "bytes": total}, batch

    def _refuse_remounted(self, history: OffsetHistory) -> None:
        """Refuse a landing directory that holds the pipeline's loaded files under a new path.

        Files are identified by path, so a directory reached through another mount would load
        every file again. When the pipeline's directory changed and a file there has the
        relative path, size and mtime of a loaded one, it is the same file seen twice.
        """
        newest = history.newest()
        previous = newest.boundary.get("directory") if newest is not None else None
        if previous and newest is not None and not newest.source and not is_store_path(previous):
            previous = os.path.realpath(previous)  # planned before paths were canonical
        if newest is None or not previous or previous == self.root:
            return
        # The directory changed (rare): only now is every plan read.
        loaded = {
            _fingerprint(f, plan.boundary.get("directory", previous))
            for plan in history.plans()
            for f in plan.inputs
        }
        for entry in self.list_files():
            if _fingerprint(entry, self.root) in loaded:
                raise ConfigurationError(
                    f"pipeline {newest.pipeline_id} loaded {previous}; its landing path is now "
                    f"{self.root}, which holds {entry['path']} with the name, size and mtime of a file "
                    "it already loaded (the same directory through another mount?). Files are "
                    "identified by their path, so they would all load again. Point landing_path at the "
                    "old path, or start a new pipeline_id on purpose"
                )

    def plan(
        self,
        plan_log: PlanLog,
        ctx: ReadContext | None = None,
        *,
        run_token: str,
        is_committed: Callable[[BatchKey], bool],
        interval: tuple[datetime, datetime] | None = None,
    ) -> Plan | None:
        """Freeze the batch this run loads (``None``: nothing new for an offset pipeline).

        The table's own files are never input, even where the table lies below the landing
        directory."""
        exclude = (plan_log.ref.location,)
        if self.boundary == "interval":
            start, end = require_interval(interval)
            label = BatchKey.for_interval(plan_log.pipeline_id, start, end).label
            return plan_interval_batch(
                plan_log,
                start=start,
                end=end,
                inputs=lambda: self.list_files(label, exclude=exclude, required=True),
                source=self.identity(),
            )
        return plan_offset_batch(
            plan_log,
            run_token=run_token,
            is_committed=is_committed,
            next_offsets=functools.partial(
                self._next_offsets, label=f"{plan_log.pipeline_id} (its next batch)", exclude=exclude
            ),
            source=self.identity(),
        )

    def replan(
        self, plan: Plan, generation: int, ctx: ReadContext | None = None, *, committed: bool = True
    ) -> Plan:
        """The plan of a restatement or re-freeze: the same files (offsets) or the directory as
        it is now (interval), frozen again with their current size and mtime.

        :param committed: whether the table holds the batch. A committed batch's planned file
            that is gone fails the restatement (its rows would silently go); a batch never
            committed is re-frozen without it, since it was never loaded.
        """
        # "dropped" describes one re-freeze; a later generation starts from its own.
        boundary = {k: v for k, v in plan.boundary.items() if k != "dropped"}
        dropped: list[str] = []
        if plan.kind == "interval":
            inputs = self.list_files(plan.key.label, required=True)
        else:
            # Plans of older releases kept paths as given (through symlinks): a new
            # generation is written canonically, like every plan now.
            planned = [dict(entry, path=_canonical(entry["path"], plan)) for entry in plan.inputs]
            if "directory" in boundary and not is_store_path(boundary["directory"]):
                boundary["directory"] = os.path.realpath(boundary["directory"])
            inputs = []
            for entry in planned:
                try:
                    inputs.append(self._stat(entry, plan.key.label))
                except (InputChangedError, UnsafePathError) as exc:
                    if committed:
                        # The usual way out ("re-freeze it") is what is running: say the real one.
                        raise InputChangedError(
                            plan.key.label,
                            f"restating generation {plan.generation} needs every file the batch loaded, "
                            f"and {entry['path']} is gone (or is no longer a regular file inside "
                            f"{self.root}); nothing was committed. A committed batch is "
                            "never restated without one of its files, since its rows would silently go: "
                            "restore the file (any corrected content) and run the restatement again "
                            "(see the runbook, 'Restating a batch')",
                        ) from exc
                    log.warning("batch %s: re-freezing without %s: %s", plan.key, entry["path"], exc.cause)
                    dropped.append(entry["path"])
        if dropped:
            # The commit refuses to swap out a generation that landed meanwhile holding them.
            boundary["dropped"] = dropped
        return replace(
            plan,
            boundary=boundary,
            inputs=inputs,
            generation=generation,
            planned_at="",
            source=self.identity(),
        )

    def verify(self, plan: Plan, ctx: ReadContext | None = None) -> None:
        """Fail if any planned file changed since planning (invariant I3)."""
        for entry in plan.inputs:
            now = self._stat(entry, plan.key.label)
            if now != entry:
                mark = "etag" if "etag" in now else "mtime_ns"
                raise InputChangedError(
                    plan.key.label,
                    f"landing file {entry['path']} changed after it was planned "
                    f"(size {entry['size']} -> {now['size']}, {mark} {entry.get(mark)} -> "
                    f"{now[mark]}); nothing was committed. Restore the file and clear the task, "
                    "or re-freeze the batch on purpose to load the file as it is now: "
                    f"{refreeze_hint(plan.pipeline_id, plan.batch_key)} (see the runbook)",
                )

    def _stat(self, entry: dict[str, Any], label: str) -> dict[str, Any]:
        """The file's entry as it is now; a planned file that is gone fails the batch.

        The path comes from the plan log, which whoever controls the table's files can write:
        it is read only if it is a regular file, not a link, inside the landing directory
        (invariant I11). Otherwise :class:`UnsafePathError`, and nothing is read. On an object
        store: below the landing prefix, with a key that climbs nowhere.
        """
        if self.on_store:
            return self.store().stat(entry, label)
        path = entry.get("path")
        root = self.root
        inside = (
            isinstance(path, str)
            and "\0" not in path
            and os.path.isabs(path)
            and os.path.realpath(path).startswith(root.rstrip(os.sep) + os.sep)
        )
        try:
            st = os.lstat(str(path)) if inside else None
        except FileNotFoundError:
            pipeline, _, key = label.rpartition("/")
            raise InputChangedError(
                label,
                f"landing file {path} was planned but is gone; nothing was committed. Restore "
                f"it, or re-freeze the batch on purpose without it: {refreeze_hint(pipeline, key)}",
            ) from None
        if st is None or not stat.S_ISREG(st.st_mode):
            what = (
                f"resolves outside the landing directory {root} (a link, '..' or another root)"
                if st is None
                else f"is not a regular file of {root} (a link, a FIFO)"
            )
            raise UnsafePathError(
                label,
                f"planned landing file {path!r} {what}; it was not read and nothing was "
                "committed. A link is never input: put the regular file back at that path, or "
                "re-freeze the batch on purpose without it (restate=True with restate_batch_key)",
            )
        return {"path": path, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
