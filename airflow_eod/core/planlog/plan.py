"""A frozen batch plan: what every attempt of a batch reads, the same slice each time (I3).

The plan log (:mod:`airflow_eod.core.planlog.store`) keeps plans; this module says what one is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_eod.core.batch import BatchKey, fingerprint

PLAN_FORMAT = 1
INTERVAL = "interval"
OFFSETS = "offsets"


@dataclass(frozen=True)
class Plan:
    """A frozen batch plan.

    :param pipeline_id: the pipeline.
    :param batch_key: the batch key derived from the boundary.
    :param kind: ``interval`` or ``offsets``.
    :param boundary: the interval (``start``/``end``) or the offset range.
    :param inputs: the frozen inputs, e.g. files with path, size and mtime.
    :param seq: the position of an offset batch in its pipeline (``None`` for intervals).
    :param planned_at: when the plan was first written (ISO 8601, UTC).
    :param generation: 0 for the first load; N for the plan of the N-th restatement or
        re-freeze.
    :param source: what the slice was taken from (see ``identity()`` of the sources): a
        stored plan is only ever reused by an attempt whose source is the same.
    """

    pipeline_id: str
    batch_key: str
    kind: str
    boundary: dict[str, Any]
    inputs: list[dict[str, Any]]
    seq: int | None = None
    planned_at: str = ""
    generation: int = 0
    source: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> BatchKey:
        return BatchKey(self.pipeline_id, self.batch_key)

    @property
    def input_fingerprint(self) -> str:
        return fingerprint({"boundary": self.boundary, "inputs": self.inputs})
