"""What a merge load is told: the business key, the ordering column and the delete marker.

A merge load replaces a table row only with a newer one, newer by its ordering column, so
batches applied in any order, and any batch applied again, end in the same table
(invariant I9). These rules are plain data: the operators check them when the DAG is
parsed, the Spark side computes the merge with them (:mod:`airflow_eod.spark.merge_job`),
and every merge commit's manifest carries them, so ``verify`` knows a merge table by its
log alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.options import is_template

APPEND = "append"
MERGE = "merge"
WRITE_MODES = (APPEND, MERGE)
# The manifest's ``extra`` entry a merge commit carries.
MANIFEST_ENTRY = "merge"
# Column names airflow-eod adds while it computes a merge; a table may not use them.
RESERVED_PREFIX = "_eod_"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def _column(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.match(value) or value.startswith(RESERVED_PREFIX):
        raise ConfigurationError(
            f"{what} {value!r} is not a column name a merge can use: letters, digits and '_', "
            f"starting with a letter or '_', and not starting with {RESERVED_PREFIX!r}"
        )
    return value


@dataclass(frozen=True)
class MergeRules:
    """How a merge load folds a batch into the table.

    :param keys: the business key: at most one live row per key.
    :param order_by: the ordering column (``updated_at``, a CDC log sequence number...): a
        batch row replaces the table's row of its key only when its value is greater (ties:
        the table's row stays, except in a restatement, where the restated row wins). Among
        rows of one batch with one key, the greatest wins; full ties are broken by the
        row's content, so every attempt picks the same row.
    :param delete_when: a column (boolean) or a Spark SQL expression that is true for a
        row that deletes its key, e.g. ``"op = 'D'"``; ``None``: no deletes.
    :param keep_tombstones: keep a deleting row in the table as a tombstone (the row
        itself, with ``delete_when`` true), so that an older insert of the key, loaded
        later (a backfill, a replay), does not bring it back. Readers filter tombstones out
        with ``NOT (<delete_when>)``. ``False`` removes the row: then merges of a key
        commute only while its deletes arrive after its inserts.
    """

    keys: tuple[str, ...]
    order_by: str
    delete_when: str | None = None
    keep_tombstones: bool = True

    def __post_init__(self) -> None:
        keys = (self.keys,) if isinstance(self.keys, str) else tuple(self.keys or ())
        if not keys:
            raise ConfigurationError("write_mode='merge' needs merge_keys: the column(s) of the business key")
        for k in keys:
            _column("merge_keys column", k)
        if len(set(keys)) != len(keys):
            raise ConfigurationError(f"merge_keys {list(keys)} names a column twice")
        _column("order_by", self.order_by)
        if self.order_by in keys:
            raise ConfigurationError(f"order_by {self.order_by!r} is a merge key; order by another column")
        if self.delete_when is not None and (
            not isinstance(self.delete_when, str) or not self.delete_when.strip()
        ):
            raise ConfigurationError("delete_when must be a column name or a Spark SQL expression")
        if not isinstance(self.keep_tombstones, bool):
            raise ConfigurationError(f"keep_tombstones must be True or False, not {self.keep_tombstones!r}")
        object.__setattr__(self, "keys", keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "keys": list(self.keys),
            "order_by": self.order_by,
            "delete_when": self.delete_when,
            "keep_tombstones": self.keep_tombstones,
        }

    @classmethod
    def from_dict(cls, body: Mapping[str, Any]) -> MergeRules:
        """The rules a manifest's ``extra["merge"]`` holds (``ValueError`` if malformed)."""
        try:
            return cls(
                keys=tuple(body["keys"]),
                order_by=body["order_by"],
                delete_when=body.get("delete_when"),
                keep_tombstones=bool(body.get("keep_tombstones", True)),
            )
        except (KeyError, TypeError, ConfigurationError) as exc:
            raise ValueError(f"not merge rules: {exc}") from exc


def check_merge_columns(rules: MergeRules | None, columns: Sequence[str] | None, where: str) -> None:
    """Refuse, when the DAG is parsed, ``merge_keys`` or an ``order_by`` that the load's
    declared columns (a landing ``schema``, a JDBC ``columns`` list) do not have. Names are
    matched exactly, as the merge matches them in the batch.

    :param rules: the load's merge rules (``None``: an append, nothing to check).
    :param columns: the declared columns, or ``None`` when nothing declares them (or a
        transform may change them).
    :param where: what declares them, for the message (``"the schema"``).
    """
    if rules is None or columns is None:
        return
    known = set(columns)
    missing = [c for c in (*rules.keys, rules.order_by) if c not in known]
    if missing:
        raise ConfigurationError(
            f"merge_keys/order_by {missing} are not columns of {where} {list(columns)} (names are "
            "matched exactly)"
        )


def merge_rules(
    write_mode: str,
    merge_keys: Sequence[str] | str | None,
    order_by: str | None,
    delete_when: str | None = None,
    keep_tombstones: bool = True,
) -> MergeRules | None:
    """The rules of a load's settings: ``None`` for an append, refused when the settings
    mix the modes (merge settings on an append would be silently ignored)."""
    if write_mode not in WRITE_MODES:
        raise ConfigurationError(f"write_mode must be one of {', '.join(WRITE_MODES)}, not {write_mode!r}")
    if write_mode == APPEND:
        given = [
            n
            for n, v in (("merge_keys", merge_keys), ("order_by", order_by), ("delete_when", delete_when))
            if v
        ]
        if keep_tombstones is not True:
            given.append("keep_tombstones")
        if given:
            raise ConfigurationError(
                f"{', '.join(given)} is set but write_mode is 'append', which ignores it: set "
                "write_mode='merge' for an upsert"
            )
        return None
    if not order_by:
        raise ConfigurationError(
            "write_mode='merge' needs order_by: a column whose value grows with every change of a "
            "row (updated_at, a CDC log sequence number), so that a replayed or backfilled batch "
            "never writes an older row over a newer one"
        )
    if keep_tombstones is False and not delete_when:
        raise ConfigurationError(
            "keep_tombstones=False removes the rows that delete their key, but no delete_when says "
            "which rows those are: set delete_when (a boolean column or an expression such as "
            "\"op = 'D'\"), or leave keep_tombstones at its default"
        )
    keys = (merge_keys,) if isinstance(merge_keys, str) else tuple(merge_keys or ())
    return MergeRules(keys=keys, order_by=order_by, delete_when=delete_when, keep_tombstones=keep_tombstones)


def refuse_templated(
    write_mode: Any, merge_keys: Any, order_by: Any, delete_when: Any, keep_tombstones: Any
) -> None:
    """Refuse a Jinja template in a merge setting: they are not template fields (a run may
    not change what the table's key, order or delete rule is), so the template would reach
    the load as literal text."""
    keys = [merge_keys] if isinstance(merge_keys, str) else list(merge_keys or [])
    named = [("write_mode", write_mode), *(("merge_keys", k) for k in keys)]
    named += [("order_by", order_by), ("delete_when", delete_when), ("keep_tombstones", keep_tombstones)]
    templated = sorted({name for name, value in named if is_template(value)})
    if templated:
        raise ConfigurationError(
            f"{', '.join(templated)} cannot be templated: a merge load's write_mode, merge_keys, "
            "order_by, delete_when and keep_tombstones define the table and are the same for every "
            "run of the pipeline, so they are checked when the DAG is parsed. Write them in the DAG"
        )
