"""Delta's duration strings (``interval 30 days``), as table properties spell them."""

from __future__ import annotations

import re
from datetime import timedelta

from airflow_eod.core.errors import ConfigurationError

_UNITS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
}
_INTERVAL_RE = re.compile(r"^\s*interval\s+(\d+)\s+([a-z]+?)s?\s*$", re.IGNORECASE)


def parse_interval(text: str) -> timedelta:
    """Parse a Delta interval such as ``interval 30 days``."""
    m = _INTERVAL_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigurationError(f"cannot read the retention interval {text!r}; use e.g. 'interval 30 days'")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2).lower()])
