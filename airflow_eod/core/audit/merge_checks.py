"""The merge checks: one live row per key, and every key a merge batch loaded still live at
the batch's ordering value or a newer one, unless a delete superseded it.

A merge replaces a key's row only with a newer one (invariant I9), so whatever later
batches did, the key's live row is at least as new as each committed batch's row of it.
The evidence is each batch's key digest (:mod:`airflow_eod.core.merge_digest`: its keys,
ordering values and deletes, written before its commit), judged against the live rows
(:mod:`~airflow_eod.core.audit.merge_facts`). For each merge batch (grouped by their rules):

- ``merge_duplicate_key``: a key the merge batches loaded with more than one live row
  (every key, when a batch's digest is not read);
- ``merge_key_regressed``: a key of the batch whose live row is older than the batch's, or
  as old but of the other delete-ness (a delete brought back, a tombstone overwritten);
- ``merge_key_lost``: a key of the batch with no live row, where no merge batch deleted it
  at the batch's value or later (without tombstones that delete removed the row; with them,
  another writer may purge the tombstone, as docs/merge-loads.md allows).

A digest that is missing is a warning (``merge_keys_missing``); one whose folder is not the
batch's own is refused unread (``merge_keys_refused``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_eod.core.audit.merge_facts import ORDER, Budget, Unread, read_digest, read_live_keys
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.merge_digest import DELETE_COLUMN, KEYS_DIR_ENTRY
from airflow_eod.core.merge_rules import MergeRules

EXAMPLES = 3  # keys a finding names
_BATCH, _LIVE, _LIVE_DELETE, _HARD = "_eod_batch", "_eod_live", "_eod_live_delete", "_eod_hard"


def check_merge_keys(audit: AuditState) -> None:
    """Report duplicated, regressed and lost keys of the table's committed merge batches."""
    groups: dict[MergeRules, list[BatchKey]] = {}
    for key in sorted(audit.merge, key=lambda k: k.label):
        try:
            groups.setdefault(MergeRules.from_dict(audit.merge[key]), []).append(key)
        except ValueError as exc:
            why = f"is not read: its manifest's merge rules do not parse ({exc})"
            audit.add("merge_keys_missing", key, gen=audit.batches[key].generation, why=why)
    budget = Budget()
    for rules, batches in groups.items():
        _check_group(audit, rules, batches, budget)


def _check_group(audit: AuditState, rules: MergeRules, batches: list[BatchKey], budget: Budget) -> None:
    keys = ", ".join(rules.keys)
    try:
        live, deletes_known = read_live_keys(audit, rules)
    except Unread as exc:
        what = f"no key of its {len(batches)} merge batch(es) was checked"
        audit.add("merge_keys_unchecked", None, keys=keys, what=what, why=str(exc))
        return
    if not deletes_known:
        what = "at equal ordering values, whether the live row is a delete was not compared"
        why = f"delete_when {rules.delete_when!r} is not an expression verify runs (see docs/reference.md)"
        audit.add("merge_keys_unchecked", None, keys=keys, what=what, why=why)
    live = live.filter(_no_null_key(live, rules))  # a merge writes no null key; another writer's
    digests: list[tuple[BatchKey, pa.Table]] = []
    # Newest batches first: the digest budget goes to those most likely to be live.
    for key in sorted(batches, key=lambda k: -(audit.batches[k].version or 0)):
        gen = audit.batches[key].generation
        named = audit.merge[key].get(KEYS_DIR_ENTRY)
        try:
            digest = read_digest(audit, key, named, rules, budget)
            digests.append((key, _typed(digest, live.schema, rules)))
        except UnsafePathError as exc:
            audit.add("merge_keys_refused", key, gen=gen, dir=repr(named)[:300], why=exc.cause)
        except Unread as exc:
            audit.add("merge_keys_missing", key, gen=gen, why=f"{exc}")
    loaded = None
    if len(digests) == len(batches):  # every batch's keys are known: only theirs are judged
        loaded = pa.concat_tables([d.select(list(rules.keys)) for _, d in digests]) if digests else None
    _duplicates(audit, rules, live, loaded)
    if digests:
        _regressed_or_lost(audit, rules, live, digests)


def _no_null_key(table: pa.Table, rules: MergeRules) -> Any:
    mask = pc.is_valid(table[rules.keys[0]])
    for k in rules.keys[1:]:
        mask = pc.and_(mask, pc.is_valid(table[k]))
    return mask


def _typed(digest: pa.Table, schema: pa.Schema, rules: MergeRules) -> pa.Table:
    """``digest`` with the key and ordering columns of the live rows' types (a batch may
    carry an ``int`` the table holds as ``bigint``)."""
    target = pa.schema(
        [schema.field(n) for n in (*rules.keys, ORDER)] + [pa.field(DELETE_COLUMN, pa.bool_())]
    )
    try:
        return digest.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise Unread(f"holds keys or ordering values of other types than the table's ({exc})") from None


def _key_text(row: dict[str, Any], rules: MergeRules) -> str:
    return ", ".join(f"{k}={row[k]!r}" for k in rules.keys)


def _duplicates(audit: AuditState, rules: MergeRules, live: pa.Table, loaded: pa.Table | None) -> None:
    keys = list(rules.keys)
    counts = live.group_by(keys).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts["count_all"], 1))
    if loaded is not None and dups.num_rows:
        dups = dups.join(loaded.group_by(keys).aggregate([]), keys, join_type="left semi")
    if not dups.num_rows:
        return
    shown = dups.sort_by([("count_all", "descending")]).slice(0, EXAMPLES).to_pylist()
    examples = "; ".join(f"{_key_text(r, rules)}: {r['count_all']} rows" for r in shown)
    scope = "that merge batches loaded" if loaded is not None else "(any key: a digest was not read)"
    say = {"n": dups.num_rows, "keys": ", ".join(keys), "scope": scope, "examples": examples}
    audit.add("merge_duplicate_key", None, **say)


def _newest_live(live: pa.Table, rules: MergeRules) -> pa.Table:
    """Per key: its newest live ordering value (:data:`_LIVE`) and whether a row at that
    value is a delete (:data:`_LIVE_DELETE`; null when not known)."""
    keys = list(rules.keys)
    newest = live.group_by(keys).aggregate([(ORDER, "max")])
    rows = live.join(newest, keys)
    rows = rows.filter(pc.equal(rows[ORDER], rows[f"{ORDER}_max"]))
    best = rows.group_by(keys).aggregate([(ORDER, "max"), (DELETE_COLUMN, "any")])
    return best.select([*keys, f"{ORDER}_max", f"{DELETE_COLUMN}_any"]).rename_columns(
        [*keys, _LIVE, _LIVE_DELETE]
    )


def _regressed_or_lost(
    audit: AuditState, rules: MergeRules, live: pa.Table, digests: list[tuple[BatchKey, pa.Table]]
) -> None:
    keys = list(rules.keys)
    union = pa.concat_tables(
        [
            d.append_column(_BATCH, pa.repeat(pa.scalar(i, pa.int32()), d.num_rows))
            for i, (_, d) in enumerate(digests)
        ]
    )
    joined = union.join(_newest_live(live, rules), keys, join_type="left outer")
    # A delete at the batch's value or later makes the key's absence its newest state: a
    # merge without tombstones removes the row, and with tombstones another writer may purge
    # them once no older batch can arrive (docs/merge-loads.md calls that safe).
    deletes = union.filter(union[DELETE_COLUMN]).group_by(keys).aggregate([(ORDER, "max")])
    joined = joined.join(
        deletes.select([*keys, f"{ORDER}_max"]).rename_columns([*keys, _HARD]),
        keys,
        join_type="left outer",
    )
    superseded = pc.fill_null(pc.greater_equal(joined[_HARD], joined[ORDER]), False)
    absent = pc.is_null(joined[_LIVE])
    lost = pc.and_(absent, pc.invert(superseded))
    older = pc.fill_null(pc.less(joined[_LIVE], joined[ORDER]), False)
    same = pc.equal(joined[_LIVE], joined[ORDER])
    flipped = pc.fill_null(pc.and_(same, pc.not_equal(joined[_LIVE_DELETE], joined[DELETE_COLUMN])), False)
    bad = joined.append_column("_eod_lost", lost).filter(pc.or_(lost, pc.or_(older, flipped)))
    for i in sorted(pc.unique(bad[_BATCH]).to_pylist(), key=lambda i: digests[i][0].label):
        key, digest = digests[i]
        mine = bad.filter(pc.equal(bad[_BATCH], i))
        gen = audit.batches[key].generation
        for kind, rows in (
            ("merge_key_lost", mine.filter(mine["_eod_lost"])),
            ("merge_key_regressed", mine.filter(pc.invert(mine["_eod_lost"]))),
        ):
            if rows.num_rows:
                examples = "; ".join(_example(r, rules, kind) for r in rows.slice(0, EXAMPLES).to_pylist())
                say = {"gen": gen, "n": rows.num_rows, "keys": digest.num_rows, "order": rules.order_by}
                audit.add(kind, key, examples=examples, **say)


def _example(row: dict[str, Any], rules: MergeRules, kind: str) -> str:
    theirs = f"the batch's {rules.order_by} {row[ORDER]!r}{' (a delete)' if row[DELETE_COLUMN] else ''}"
    if kind == "merge_key_lost":
        return f"{_key_text(row, rules)}: no live row, {theirs}"
    state = {True: " (a delete)", False: "", None: ""}[row[_LIVE_DELETE]]
    return f"{_key_text(row, rules)}: live {rules.order_by} {row[_LIVE]!r}{state}, {theirs}"
