"""What every source provides, and the context it reads with.

A source plans a frozen slice (``plan``), re-freezes it for a restatement (``replan``),
checks that the slice has not changed (``verify``) and reads exactly that slice (``read``).
Credentials travel in the :class:`ReadContext`, never in a plan, a spec or a manifest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.planlog.store import Plan, PlanLog

# A pyspark.sql.SparkSession. Named, not imported: the core never imports Spark, so that it
# runs (and is tested) without a JVM.
SparkSession = Any


@dataclass(frozen=True)
class Credentials:
    """A user name and password for a source. The password never appears in ``repr``."""

    user: str
    password: str = field(repr=False)

    def __repr__(self) -> str:
        return f"Credentials(user={self.user!r}, password=***)"


@dataclass
class ReadContext:
    """What a source may need to plan or read: a SparkSession (made on first use) and
    credentials.

    :param spark_factory: returns the SparkSession; called at most once.
    :param credentials: the source's credentials, if it has any.
    :param schema_drift: the load's ``schema_drift`` policy: what a source column that the
        declared schema lacks does when read (``fail`` or ``add_columns``).
    :param fail_fast: read records that do not parse or fit the schema as a failure of the
        first action (Spark's FAILFAST) instead of keeping them in a corrupt-record column.
    :param facts: what planning found that the load result reports (``null_key_rows``).
    """

    spark_factory: Callable[[], SparkSession] | None = None
    credentials: Credentials | None = None
    schema_drift: str = "fail"
    fail_fast: bool = False
    facts: dict[str, Any] = field(default_factory=dict)
    _spark: Any = None

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            if self.spark_factory is None:
                raise RuntimeError("this read context has no SparkSession")
            self._spark = self.spark_factory()
        return self._spark


class Source(Protocol):
    """The interface of a source (see :mod:`airflow_eod.sources`)."""

    @property
    def boundary(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...

    def plan(
        self,
        plan_log: PlanLog,
        ctx: ReadContext,
        *,
        run_token: str,
        is_committed: Callable[[BatchKey], bool],
        interval: tuple[datetime, datetime] | None = None,
    ) -> Plan | None: ...

    def identity(self) -> dict[str, Any]: ...

    def replan(self, plan: Plan, generation: int, ctx: ReadContext, *, committed: bool = True) -> Plan: ...

    def verify(self, plan: Plan, ctx: ReadContext) -> None: ...
