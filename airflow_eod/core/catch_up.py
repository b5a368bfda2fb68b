"""Catching up in one task: offset batch after offset batch until the source is drained.

A run normally loads one batch (one frozen slice, capped by ``max_rows_per_batch`` or
``max_files_per_batch``); a backlog then waits one schedule per batch. A catch-up run loops
like Structured Streaming's ``Trigger.AvailableNow``: plan the next offset batch, load it
(each batch its own frozen, fenced commit under its usual key), and plan the next, until the
source holds nothing new or ``max_batches`` batches were loaded.

How a retry finds its batches again: batch ``i`` of the run is planned under the run token
``<run token>`` for ``i == 0`` (exactly what a run without catch-up uses) and
``<run token>#catch-up-<i>`` after that. The plan log's claim of that token freezes which
offset batch it is, put-if-absent, so a retry (or a clear) walks the same claims in the same
order: every batch it froze is loaded again from its frozen plan (I3) and reported
``already_committed`` when the table holds it, and batch ``i + 1`` is planned only after
batch ``i`` is committed, the planner's rule, so no batch is skipped (I2). Two catch-up runs
at once claim the same uncommitted newest batch where they meet, and fencing lets one of
them commit it (I4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from airflow_eod.core.result import NO_NEW_DATA, LoadResult

if TYPE_CHECKING:
    from airflow_eod.core.load_flow import LoadRequest

log = logging.getLogger(__name__)

# The batches listed on a catch-up result; older ones are counted, not listed, so the XCom
# stays small however long the backlog was.
MAX_LISTED = 100


def batch_token(run_token: str, index: int) -> str:
    """The run token batch ``index`` of a catch-up run is claimed under."""
    return run_token if index == 0 else f"{run_token}#catch-up-{index}"


@dataclass
class CatchUpResult:
    """What a catch-up run loaded.

    :param last: the result of the newest batch the run loaded (or found loaded); the
        ``no_new_data`` result when the source held nothing new at all.
    :param batches: every batch's result, in the order loaded.
    :param drained: whether the loop stopped because the source held nothing new (rather
        than at ``max_batches``).
    """

    last: LoadResult
    batches: list[LoadResult] = field(default_factory=list)
    drained: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The last batch's result, with the run's batches: ``batches`` (the newest
        :data:`MAX_LISTED`, each key, generation, version, rows, files, outcome),
        ``batches_omitted``, ``batch_count``, ``rows_loaded`` (rows the run itself committed)
        and ``drained``."""
        listed = self.batches[-MAX_LISTED:]
        return {
            **self.last.to_dict(),
            "batches": [
                {
                    "batch_key": r.batch_key,
                    "generation": r.generation,
                    "table_version": r.table_version,
                    "rows": r.rows,
                    "files": r.files,
                    "outcome": r.outcome,
                }
                for r in listed
            ],
            "batches_omitted": len(self.batches) - len(listed),
            "batch_count": len(self.batches),
            "rows_loaded": sum(r.rows for r in self.batches if r.outcome == "committed"),
            "drained": self.drained,
        }


def load_batches(
    request: LoadRequest,
    load_one: Callable[[LoadRequest], LoadResult],
    *,
    max_batches: int | None = None,
) -> CatchUpResult:
    """Load offset batches one after another until the source is drained or ``max_batches``.

    :param request: the run's request (no restatement: a restatement loads one batch).
    :param load_one: loads one batch for a request (:func:`~airflow_eod.core.load_flow.load_batch`
        with the run's source, context and runner); it raises on a failed batch, which ends
        the loop with the batches before it committed, and a retry resumes from them.
    :param max_batches: the most batches this run loads; ``None``: until drained.
    """
    if max_batches is not None and max_batches < 1:
        raise ValueError("max_batches must be at least 1")
    results: list[LoadResult] = []
    index = 0
    while max_batches is None or index < max_batches:
        result = load_one(replace(request, run_token=batch_token(request.run_token, index)))
        if result.outcome == NO_NEW_DATA:
            return CatchUpResult(results[-1] if results else result, results, drained=True)
        results.append(result)
        log.info(
            "catch-up: batch %d (%s) %s, %d rows",
            index + 1,
            result.batch_key,
            result.outcome,
            result.rows,
        )
        index += 1
    log.info("catch-up: stopped after %d batch(es) (max_batches_per_run); the next run goes on", len(results))
    return CatchUpResult(results[-1], results, drained=False)
