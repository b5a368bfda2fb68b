"""Sources: they plan a frozen slice (offsets or an interval) and read exactly that slice."""

from __future__ import annotations

from typing import Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials, ReadContext, Source
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.kafka_topics import KafkaSource
from airflow_eod.sources.landing_files import LandingFilesSource

__all__ = [
    "SOURCE_KINDS",
    "Credentials",
    "JdbcIncrementalSource",
    "KafkaSource",
    "LandingFilesSource",
    "ReadContext",
    "Source",
    "source_from_dict",
]

# The kinds of source, by the ``type`` of their ``to_dict``. This is the planning half of
# the one registry of sources: airflow_eod.spark.readers.REGISTRY pairs each kind with its
# Spark reader, and refuses to import while a kind here has no reader there.
SOURCE_KINDS: dict[str, Any] = {
    cls.kind: cls for cls in (LandingFilesSource, JdbcIncrementalSource, KafkaSource)
}


def source_from_dict(data: dict[str, Any]) -> Source:
    """Rebuild a source from its ``to_dict()`` form (how a submitted driver receives it)."""
    kind = data.get("type")
    if kind not in SOURCE_KINDS:
        raise ConfigurationError(f"unknown source type {kind!r}; known: {sorted(SOURCE_KINDS)}")
    source: Source = SOURCE_KINDS[kind].from_dict(data)
    return source
