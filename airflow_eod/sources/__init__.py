"""Sources: they plan a frozen slice (offsets or an interval) and read exactly that slice."""

from __future__ import annotations

from typing import Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials, ReadContext, Source
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource
from airflow_eod.sources.landing_files import LandingFilesSource

__all__ = [
    "Credentials",
    "JdbcIncrementalSource",
    "LandingFilesSource",
    "ReadContext",
    "Source",
    "source_from_dict",
]

_SOURCES: dict[str, Any] = {"landing_files": LandingFilesSource, "jdbc_incremental": JdbcIncrementalSource}


def source_from_dict(data: dict[str, Any]) -> Source:
    """Rebuild a source from its ``to_dict()`` form (how a submitted driver receives it)."""
    kind = data.get("type")
    if kind not in _SOURCES:
        raise ConfigurationError(f"unknown source type {kind!r}; known: {sorted(_SOURCES)}")
    source: Source = _SOURCES[kind].from_dict(data)
    return source
