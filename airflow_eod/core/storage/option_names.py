"""Storage options as delta-rs names them, turned into obstore's configuration.

A table's ``storage_options`` are the ones delta-rs takes (``AWS_ENDPOINT_URL``,
``AZURE_STORAGE_ACCOUNT_KEY``, ``GOOGLE_SERVICE_ACCOUNT``...), so one dict serves delta-rs and
the storage seam. Each store's backend describes its names with one :class:`OptionNames` table;
an option no table names is refused (a typo must not fall back to a default credential).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_YES = ("1", "true", "yes", "on")


def flag(value: object) -> bool:
    """An option's value read as a yes or no ("true", "1", "yes", "on" mean yes)."""
    return str(value).strip().lower() in _YES


@dataclass(frozen=True)
class OptionNames:
    """One store's option names (upper case; the options are matched without regard to case).

    :param store: the store's name, for errors.
    :param config: names -> obstore configuration keys taking the value as it is.
    :param flags: names -> obstore configuration keys taking a yes or no.
    :param client: names -> obstore HTTP client option keys taking the value as it is.
    :param client_flags: names -> obstore HTTP client option keys taking a yes or no.
    """

    store: str
    config: Mapping[str, str]
    flags: Mapping[str, str] = field(default_factory=dict)
    client: Mapping[str, str] = field(default_factory=dict)
    client_flags: Mapping[str, str] = field(default_factory=dict)

    @property
    def accepted(self) -> frozenset[str]:
        """Every name this store takes."""
        return frozenset().union(self.config, self.flags, self.client, self.client_flags)

    def map(self, options: Mapping[str, str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """obstore's configuration and client options for ``options``.

        :raises ValueError: for an option this store does not name.
        """
        config: dict[str, Any] = {}
        client: dict[str, Any] = {}
        for name, value in (options or {}).items():
            upper = name.upper()
            if upper in self.config:
                config[self.config[upper]] = value
            elif upper in self.flags:
                config[self.flags[upper]] = flag(value)
            elif upper in self.client:
                client[self.client[upper]] = value
            elif upper in self.client_flags:
                client[self.client_flags[upper]] = flag(value)
            else:
                raise ValueError(f"unknown {self.store} storage option {name!r}")
        return config, client
