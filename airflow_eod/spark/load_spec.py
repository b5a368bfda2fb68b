"""The load of one frozen batch as data: what crosses a process boundary to a Spark driver.

In-process code passes the typed :class:`LoadSpec`; a submitted driver receives its JSON
(:meth:`LoadSpec.to_json`), which holds no credentials. Its JSON is the spec's fields, flat,
as they always were: :class:`LoadSettings` is how the task passes them, not a new layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from airflow_eod.core.attempt import current_attempt_id
from airflow_eod.core.delta.compat import SCHEMA_FAIL
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.merge_rules import APPEND, MergeRules, merge_rules
from airflow_eod.core.options import ENGINES, SCHEMA_POLICIES, check_engine_options, choice
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.table_layout import path_part
from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from airflow_eod.core.load_flow import FrozenBatch
    from airflow_eod.core.source import Source


@dataclass(frozen=True, kw_only=True)
class LoadSettings:
    """What a load sets for every batch it loads: the :class:`LoadSpec` fields besides the
    batch. Checked where the spec is built (:meth:`LoadSpec.__post_init__`).

    :param partition_by: partition columns for a table this load creates.
    :param transform: ``"module:function"`` applied to the DataFrame before the write.
    :param engine: ``delta-rs`` (default) or ``delta-spark``.
    :param run_id: the Airflow run id, recorded in the manifest.
    :param try_number: the Airflow try number, recorded in the manifest.
    :param table_configuration: table properties for a table this load creates.
    :param schema_drift: ``fail`` or ``add_columns``.
    :param quarantine_table_uri: where malformed records go; unset: they fail the batch.
    :param write_mode: ``append`` (default) or ``merge`` (an upsert by ``merge_keys``).
    :param merge_keys: the business key of a merge load.
    :param order_by: a merge load's ordering column: newer rows replace older ones.
    :param delete_when: a merge load's delete marker (a column or a Spark SQL expression).
    :param keep_tombstones: keep deleting rows as tombstones (see
        :class:`~airflow_eod.core.merge_rules.MergeRules`).
    """

    partition_by: Sequence[str] = ()
    transform: str | None = None
    engine: str = "delta-rs"
    run_id: str | None = None
    try_number: int | None = None
    table_configuration: Mapping[str, str] = field(default_factory=dict)
    schema_drift: str = SCHEMA_FAIL
    quarantine_table_uri: str | None = None
    write_mode: str = APPEND
    merge_keys: Sequence[str] = ()
    order_by: str | None = None
    delete_when: str | None = None
    keep_tombstones: bool = True

    def __post_init__(self) -> None:
        # Copies: a list or dict the caller goes on changing does not change the settings.
        object.__setattr__(self, "partition_by", tuple(self.partition_by))
        object.__setattr__(self, "table_configuration", dict(self.table_configuration))
        keys = (self.merge_keys,) if isinstance(self.merge_keys, str) else tuple(self.merge_keys or ())
        object.__setattr__(self, "merge_keys", keys)

    @property
    def merge(self) -> MergeRules | None:
        """The merge rules of a merge load; ``None`` for an append."""
        return merge_rules(
            self.write_mode, self.merge_keys, self.order_by, self.delete_when, self.keep_tombstones
        )


@dataclass
class LoadSpec:
    """Everything a driver needs to load one planned batch (no credentials).

    :param table: the target Delta table (``table_uri`` in the spec's JSON).
    :param plan: the frozen plan, at the generation to commit.
    :param source: the source.
    :param settings: what the load sets for every batch (flat in the spec's JSON, as before).
    :param attempt_id: unique per attempt; the id of the attempt in progress when empty.
    :param restate: replace whatever the table holds of the batch, in the same commit.
    :param previous_generation: the generation a restatement replaces (for the manifest).
    """

    table: TableRef
    plan: Plan
    source: Source
    settings: LoadSettings = field(default_factory=LoadSettings)
    attempt_id: str = ""
    restate: bool = False
    previous_generation: int | None = None

    def __post_init__(self) -> None:
        choice("engine", self.settings.engine, ENGINES)
        choice("schema_drift", self.settings.schema_drift, SCHEMA_POLICIES)
        check_engine_options(
            self.settings.engine,
            restate=self.restate,
            quarantine_table_uri=self.settings.quarantine_table_uri,
        )
        _ = self.settings.merge  # refuses merge settings that do not fit together
        if self.quarantine_table is not None and self.quarantine_table == self.table:
            raise ConfigurationError("quarantine_table_uri must be another table than table_uri")
        if not self.attempt_id:
            # The id of the attempt that builds the spec (a fresh one outside any), so the
            # manifest, the staging directory and every plan-log body carry one id.
            self.attempt_id = current_attempt_id()
        path_part(self.attempt_id, "attempt id")  # it names the attempt's directory and spec

    @classmethod
    def for_batch(
        cls, ref: TableRef, frozen: FrozenBatch, source: Source, settings: LoadSettings | None = None
    ) -> LoadSpec:
        """The spec that loads ``frozen`` with ``settings`` (the defaults when ``None``)."""
        return cls(
            table=ref,
            plan=frozen.plan,
            source=source,
            settings=settings or LoadSettings(),
            restate=frozen.restate,
            previous_generation=frozen.previous_generation,
        )

    @property
    def quarantine_table(self) -> TableRef | None:
        """The quarantine table, or ``None`` when malformed records fail the batch."""
        uri = self.settings.quarantine_table_uri
        return None if uri is None else self.table.neighbour(uri, "quarantine_table_uri")

    @property
    def generation(self) -> int:
        return self.plan.generation

    def to_json(self) -> str:
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["table_uri"] = data.pop("table").location  # the wire name since the first release
        data["plan"] = asdict(self.plan)
        data["source"] = self.source.to_dict()
        settings = data.pop("settings")
        # The settings stay flat in the JSON, as a driver of the previous release reads them.
        data.update({f.name: getattr(settings, f.name) for f in fields(settings)})
        data["partition_by"] = list(settings.partition_by)
        data["merge_keys"] = list(settings.merge_keys)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, storage_options: Mapping[str, str] | None = None) -> LoadSpec:
        """The spec of ``text`` (:meth:`to_json`).

        :param storage_options: the table's storage options, which the JSON never holds (a
            submitted driver takes them from its environment): re-attached to the table, and
            so to a quarantine table on its store (:attr:`quarantine_table`).
        """
        # Imported here: the sources import the core, and only a driver needs this direction.
        from airflow_eod.core import bounded_json
        from airflow_eod.sources import source_from_dict

        data = bounded_json.loads(text)
        data["table"] = TableRef.parse(data.pop("table_uri"), storage_options or None)
        data["plan"] = Plan(**data["plan"])
        data["source"] = source_from_dict(data["source"])
        data["settings"] = LoadSettings(
            **{f.name: data.pop(f.name) for f in fields(LoadSettings) if f.name in data}
        )
        return cls(**data)
