"""Segments: settled plan-log entries kept together, a bounded number of objects.

Every batch leaves about three objects in the plan log (its plan, its claim or file claims,
its commit record), and on an object store every object is a request and a cost. Once a
batch is settled (:mod:`airflow_eod.core.records.compaction` decides and runs that), its
entries move into a segment. Layout, under the plan log's root::

    segments/<bucket>/<generation>.json   the newest generation of a bucket holds every
                                          entry ever compacted into that bucket
    segments/folders/<folder>.json        written before the first entry of the top folder
                                          (``intervals``, ``offsets``...) leaves for a segment:
                                          what the planner asks, without reading segments

An entry's bucket is a hash of its first two path parts (``offsets/00000005.json``,
``claims/<hash>.json``, ``batches/<batch key>``), taken modulo :data:`BUCKETS`, so the
records of one batch share a bucket and one listing of ``batches/<key>`` reads one bucket.
A segment holds the entries' exact stored bodies (the text of each entry, envelope and
checksum included) keyed by the entry's key below the plan log, so a compacted entry reads
and verifies exactly as it did on its own. The segment itself has the plan log's envelope:
its format, the id of the attempt that wrote it and a checksum.

Segments are write-once like every entry: a new generation is the old one's entries plus
the new ones, written with put-if-absent, and only then is the older generation removed.
A reader lists the bucket (one request), reads the newest generation (one request, or none:
a generation is never changed, so it is cached by name), and lists again if it vanished in
between. A lookup costs those two requests whatever the pipeline's history; what grows is the
bytes of a segment (about 1.7 KB per entry, :data:`BUCKETS` ways apart).
"""

from __future__ import annotations

import json
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.attempt import current_attempt_id
from airflow_eod.core.batch import fingerprint
from airflow_eod.core.errors import PlanLogError
from airflow_eod.core.storage import NotFound, Storage, UnknownOutcome, put_settled

SEGMENT_FORMAT = "eod-plan-segment/1"
BUCKETS = 64
# The folders whose entries are compacted; every other folder of the plan log (the loaded
# index, interval spans, restatement chains) is listed as it is stored.
COMPACTED = ("batches", "claims", "files", "intervals", "offsets")
_RELISTS = 5


def bucket_of(rel: str, buckets: int = BUCKETS) -> str:
    """The bucket of the entry ``rel`` (its key below the plan log)."""
    group = "/".join(rel.split("/")[:2])
    return f"{int(fingerprint(group)[:8], 16) % buckets:03d}"


def _generation(name: str) -> int | None:
    stem = name.removesuffix(".json")
    return int(stem) if name.endswith(".json") and stem.isdigit() else None


class Segments:
    """The segments of one plan log.

    :param storage: the table's storage.
    :param root: the plan log's key (``_eod/pipelines/<pipeline id>``).
    :param buckets: how many buckets (fixed for a plan log's life: entries are looked up
        by their bucket).
    """

    def __init__(self, *, storage: Storage, root: str, buckets: int = BUCKETS) -> None:
        self.storage = storage
        self.root = root
        self.buckets = buckets
        # Generations are write-once: what one held is what it holds (by key).
        self._read: dict[str, dict[str, str]] = {}
        # What readers of this (short-lived) instance found: whether any segment exists, and
        # each bucket's newest generation. A writer's checks never use them (fresh=True).
        self._present: bool | None = None
        self._newest: dict[str, tuple[int, dict[str, str]]] = {}

    def folder(self, bucket: str) -> str:
        return f"{self.root}/segments/{bucket}"

    def generations(self, bucket: str) -> list[int]:
        """The generations stored in ``bucket``, oldest first (one listing)."""
        gens = (_generation(n) for n in self.storage.list(self.folder(bucket)))
        return sorted(g for g in gens if g is not None)

    def present(self, *, fresh: bool = True) -> bool:
        """Whether any segment exists (one request, whatever they hold; none for a reader
        that asked before: ``fresh=False``)."""
        if fresh or self._present is None:
            self._present = self.storage.has_prefix(f"{self.root}/segments")
        return self._present

    def read(self, bucket: str, generation: int) -> dict[str, str]:
        """The entries (key below the plan log -> stored text) of one generation.

        :raises NotFound: when it is gone (a newer generation replaced it).
        """
        key = f"{self.folder(bucket)}/{generation:08d}.json"
        if key not in self._read:
            try:
                text = self.storage.get(key, limit=bounded_json.MAX_PLAN_LOG_ENTRY)
            except bounded_json.JsonBoundError as exc:
                raise PlanLogError(f"plan-log segment {self.storage.where(key)} is corrupt ({exc})") from None
            self._read[key] = self._parse(key, text)
        return self._read[key]

    def _parse(self, key: str, text: bytes) -> dict[str, str]:
        try:
            payload: dict[str, Any] = bounded_json.loads(text)
            checksum = payload.pop("checksum")
            entries = payload["entries"]
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise PlanLogError(
                f"plan-log segment {self.storage.where(key)} is corrupt ({exc}); see the runbook, "
                "'a corrupt plan-log entry'"
            ) from None
        if (
            fingerprint(payload) != checksum
            or payload.get("format") != SEGMENT_FORMAT
            or not isinstance(entries, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in entries.items())
        ):
            raise PlanLogError(
                f"plan-log segment {self.storage.where(key)} fails its checksum (edited by hand or "
                "truncated); see the runbook, 'a corrupt plan-log entry'"
            )
        return entries

    def newest(self, bucket: str, *, fresh: bool = True) -> tuple[int, dict[str, str]]:
        """``(generation, entries)`` of the newest generation of ``bucket``; ``(-1, {})``
        when it has none. A generation that vanished between the listing and the read was
        replaced by a newer one: the bucket is listed again. A reader (``fresh=False``) takes
        what this instance found before, if it looked."""
        if not fresh and bucket in self._newest:
            return self._newest[bucket]
        for _ in range(_RELISTS):
            gens = self.generations(bucket)
            if not gens:
                found: tuple[int, dict[str, str]] = (-1, {})
            else:
                try:
                    found = (gens[-1], self.read(bucket, gens[-1]))
                except NotFound:
                    continue
            self._newest[bucket] = found
            return found
        raise PlanLogError(f"plan-log segments {self.storage.where(self.folder(bucket))} keep changing")

    def get(self, rel: str, *, fresh: bool = True) -> bytes | None:
        """The stored text of the compacted entry ``rel``, or ``None``.

        :raises PlanLogError: naming ``rel`` when its bucket's newest segment does not read.
        """
        if rel.split("/")[0] not in COMPACTED:
            return None
        bucket = bucket_of(rel, self.buckets)
        try:
            text = self.newest(bucket, fresh=fresh)[1].get(rel)
        except PlanLogError as exc:
            # The entry's own name leads the message: it names the batch the caller works on.
            raise PlanLogError(
                f"plan-log entry {rel} cannot be looked up: {exc} (see the runbook, 'a corrupt "
                "plan-log segment')"
            ) from None
        return None if text is None else text.encode()

    def names_under(self, folder: str) -> set[str]:
        """The names directly under ``folder`` (a key below the plan log) that segments hold.

        A folder two parts deep (``batches/<key>``) lies in one bucket; a top folder
        (``batches``, ``offsets``) in all of them (:data:`BUCKETS` listings and reads)."""
        parts = folder.split("/") if folder else []
        if not parts or parts[0] not in COMPACTED:
            return set()
        if len(parts) >= 2:
            buckets = [bucket_of(folder, self.buckets)]
        elif not self.present():
            return set()
        else:
            buckets = [f"{b:03d}" for b in range(self.buckets)]
        prefix = folder + "/"
        out: set[str] = set()
        for bucket in buckets:
            for rel in self.newest(bucket)[1]:
                if rel.startswith(prefix):
                    out.add(rel[len(prefix) :].split("/")[0])
        return out

    def _folder_mark(self, folder: str) -> str:
        return f"{self.root}/segments/folders/{folder}.json"

    def mark(self, folder: str) -> None:
        """Record that segments hold entries of the top folder ``folder`` (write-once, before
        the first of them is deleted), so :meth:`holds` answers without reading a segment."""
        if self.storage.head(self._folder_mark(folder)) is None:
            try:
                self.storage.put_if_absent(self._folder_mark(folder), b"{}")
            except UnknownOutcome:  # any writer's mark says the same: only its presence counts
                if self.storage.head(self._folder_mark(folder)) is None:
                    raise

    def holds(self, folder: str) -> bool:
        """Whether segments hold entries under the top folder ``folder``: one request."""
        return self.storage.head(self._folder_mark(folder)) is not None

    def write(self, bucket: str, generation: int, entries: dict[str, str]) -> bool:
        """Write generation ``generation`` of ``bucket`` holding ``entries`` unless it exists
        (put-if-absent), and read it back; True if this call wrote it."""
        key = f"{self.folder(bucket)}/{generation:08d}.json"
        ident = current_attempt_id()
        payload: dict[str, Any] = {"format": SEGMENT_FORMAT, "attempt": ident, "entries": entries}
        payload["checksum"] = fingerprint(payload)
        data = json.dumps(payload, sort_keys=True).encode()
        if not put_settled(self.storage, key, data, attempt=ident):
            return False
        # Read back what readers will read: a segment that does not verify deletes nothing.
        if self._parse(key, self.storage.get(key, limit=bounded_json.MAX_PLAN_LOG_ENTRY)) != entries:
            raise PlanLogError(f"plan-log segment {self.storage.where(key)} does not read back as written")
        self._read[key] = dict(entries)
        return True

    def drop(self, bucket: str, generation: int) -> None:
        """Remove one (older) generation of ``bucket``."""
        self.storage.delete(f"{self.folder(bucket)}/{generation:08d}.json")
