"""The manifest: the frozen description of a batch, stored in the commit that lands it.

It rides in the commit's ``userMetadata`` (JSON) next to the ``txn`` marker, so the
table alone can answer "what was in batch K, and who committed it".
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from airflow_eod.core import bounded_json

MANIFEST_FORMAT = 1
_TAG = "airflow_eod"


@dataclass(frozen=True)
class Manifest:
    """What one committed batch was.

    :param pipeline_id: the pipeline.
    :param batch_key: the batch key.
    :param generation: 0 for the first load, +1 for each restatement.
    :param boundary: the frozen boundary (interval, or offsets such as a file list).
    :param input_fingerprint: a hash of the frozen inputs.
    :param rows: rows committed.
    :param files: data files committed.
    :param attempt_id: the attempt that committed (unique per attempt).
    :param run_id: the Airflow run id that committed, when there was one.
    :param try_number: the Airflow try number that committed, when there was one.
    :param engine: the commit engine (``delta-rs`` or ``delta-spark``).
    :param previous_generation: the generation this one replaced, if any.
    """

    pipeline_id: str
    batch_key: str
    generation: int
    boundary: dict[str, Any]
    input_fingerprint: str
    rows: int
    files: int
    attempt_id: str
    engine: str
    run_id: str | None = None
    try_number: int | None = None
    previous_generation: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_user_metadata(self) -> str:
        """The JSON string stored as the commit's ``userMetadata``."""
        return json.dumps({_TAG: {"format": MANIFEST_FORMAT, **asdict(self)}}, sort_keys=True)

    @classmethod
    def from_user_metadata(cls, text: str | None) -> Manifest | None:
        """Parse ``userMetadata`` written by airflow-eod; ``None`` for anything else."""
        if not text:
            return None
        try:
            body = bounded_json.loads(text).get(_TAG)
        except (ValueError, AttributeError):  # ValueError: not JSON, or out of bounds
            return None
        if not isinstance(body, dict) or body.get("format") != MANIFEST_FORMAT:
            return None
        body = {k: v for k, v in body.items() if k != "format"}
        try:
            return cls.from_dict(body)
        except ValueError:
            return None

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> Manifest:
        """The manifest ``body`` (as :func:`dataclasses.asdict` gives it) describes; a
        :class:`ValueError` saying what is wrong when it has a key a manifest has not, lacks
        one it must have, or holds a value of the wrong type (it comes from a table's files,
        which whoever can write the table controls)."""
        if not isinstance(body, dict):
            raise ValueError(f"is a {type(body).__name__}, not an object")
        if extra := sorted(set(body) - set(_TYPES)):
            raise ValueError(f"has keys no manifest has: {', '.join(map(repr, extra))}")
        if missing := sorted(_REQUIRED - set(body)):
            raise ValueError(f"lacks the key(s) {', '.join(map(repr, missing))}")
        for key, value in body.items():
            want = _TYPES[key]
            if value is None and key in _OPTIONAL:
                continue
            # bool is an int to Python, never to a manifest.
            if not isinstance(value, want) or isinstance(value, bool):
                raise ValueError(f"has a {key} of type {type(value).__name__}")
        return cls(**body)


_TYPES: dict[str, type] = {
    "pipeline_id": str,
    "batch_key": str,
    "generation": int,
    "boundary": dict,
    "input_fingerprint": str,
    "rows": int,
    "files": int,
    "attempt_id": str,
    "engine": str,
    "run_id": str,
    "try_number": int,
    "previous_generation": int,
    "extra": dict,
}
_OPTIONAL = {"run_id", "try_number", "previous_generation"}  # may be None
_REQUIRED = {f.name for f in fields(Manifest) if f.default is MISSING and f.default_factory is MISSING}
