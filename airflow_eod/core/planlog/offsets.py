"""What an offset pipeline has loaded so far, read at a cost that does not grow with it.

Planning the next offset batch needs the newest committed batch (a JDBC source continues
from its ``high``) or the set of inputs every batch loaded (a landing directory skips the
files it already loaded). Reading every earlier plan for that made the N-th batch cost N.

So the newest plan is found by probing forward from a compacted index, and the loaded set
is the index plus the plans after it. Every :data:`INDEX_EVERY` batches, planning writes a
new index (put-if-absent, checksummed like every plan-log entry) holding the keys of every
committed batch up to a sequence number. Those keys never change once their batch is
committed: a restatement of an offset batch re-freezes the same files, and a re-freeze that
drops files happens only to a batch nobody committed, which no index covers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_eod.core.planlog.store import Plan, PlanLog, record_name, recorded_generations

INDEX_EVERY = 100

# The keys one plan contributes to the loaded set (a landing file's canonical path).
LoadedKeys = Callable[[Plan], Iterable[str]]


def committed_plan(plan_log: PlanLog, plan: Plan) -> Plan:
    """What a committed offset batch holds: the plan of its committed generation.

    A re-freeze may drop a planned file that was gone (never loaded): the next batch loads
    it when it is delivered again. A re-freeze that never committed must not count, though:
    its older generation may be the one that landed. When the commit record cannot say
    which generation landed, every generation's inputs count as loaded.
    """
    newest = plan_log.newest_generation(plan.batch_key)
    if newest == 0:
        return plan
    table_id = plan_log.bound_table_id()
    record = _newest_record(plan_log, plan.batch_key, table_id) if table_id else None
    if record is not None:
        return plan_log.get_plan(plan.batch_key, int(record["generation"])) or plan
    inputs: dict[str, dict[str, Any]] = {}
    for gen in range(newest + 1):
        for entry in (plan_log.get_plan(plan.batch_key, gen) or plan).inputs:
            inputs.setdefault(str(entry.get("path", len(inputs))), entry)
    return replace(plan, inputs=list(inputs.values()))


def _newest_record(plan_log: PlanLog, batch_key: str, table_id: str) -> dict[str, Any] | None:
    """The newest commit record of ``batch_key`` in table ``table_id``, as stored (what
    :class:`airflow_eod.core.records.record_files.RecordStore` reads, one room up)."""
    gens = recorded_generations(plan_log.names("batches", batch_key), table_id)
    if not gens:
        return None
    return plan_log.read_entry(plan_log.entry_path("batches", batch_key, record_name(max(gens), table_id)))


@dataclass
class OffsetHistory:
    """The offset batches of one pipeline, read lazily.

    :param plan_log: the pipeline's plan log.
    :param newest_seq: the sequence number of the newest planned batch (``None``: none).
    """

    plan_log: PlanLog
    newest_seq: int | None
    _resolved: dict[int, Plan] = field(default_factory=dict)

    @classmethod
    def read(cls, plan_log: PlanLog) -> OffsetHistory:
        return cls(plan_log, plan_log.newest_offset_seq())

    def plan(self, seq: int) -> Plan:
        """The stored plan of batch ``seq`` (its first generation)."""
        return self.plan_log.get_offset_plan(seq)

    def committed(self, seq: int) -> Plan:
        """Batch ``seq`` as committed (see :func:`committed_plan`)."""
        if seq not in self._resolved:
            self._resolved[seq] = committed_plan(self.plan_log, self.plan(seq))
        return self._resolved[seq]

    def newest(self) -> Plan | None:
        """The newest batch, as committed (planning asks for the next batch only once the
        newest is committed)."""
        return None if self.newest_seq is None else self.committed(self.newest_seq)

    def plans(self) -> list[Plan]:
        """Every batch, as committed: reads the whole log, for rare checks only."""
        return [self.committed(s) for s in range(self.newest_seq + 1)] if self.newest_seq is not None else []

    def loaded(self, keys: LoadedKeys) -> set[str]:
        """Every key (see ``keys``) of every batch: the newest index plus the plans after it.

        Writes a new index once the plans after the newest one reach :data:`INDEX_EVERY`.
        """
        if self.newest_seq is None:
            return set()
        indexed = self.plan_log.loaded_index()
        through, found = indexed if indexed is not None else (-1, [])
        loaded = set(found)
        for seq in range(through + 1, self.newest_seq + 1):
            loaded.update(keys(self.committed(seq)))
        if self.newest_seq - through >= INDEX_EVERY:
            self.plan_log.put_loaded_index(self.newest_seq, sorted(loaded))
        return loaded
