"""Delta Spark as the other writer of a chaos trial's tables, and the model of what it wrote.

Between and during airflow-eod's loads, the harness's own SparkSession (with the Delta Spark
jars and SQL extension) runs what a team's Delta Spark jobs run on such a table: appends of
rows no pipeline loaded ("foreign" rows, ids ``f<k>r<i>``), ``OPTIMIZE`` (also with
``ZORDER BY``), ``VACUUM`` with the retention check off, ``DELETE``/``UPDATE``/``MERGE`` of
foreign rows (which rewrite every file they touch, batch rows included once ``OPTIMIZE`` has
mixed them), an ``UPDATE`` that rewrites batch files with their own values, a checkpoint,
``ALTER TABLE ADD COLUMNS`` (on the table whose pipeline loads with
``schema_drift="add_columns"``: a ``fail`` pipeline refuses a column it lacks, as
docs/reference.md says) and ``SET TBLPROPERTIES``.

:class:`ForeignRows` is what the checker (``tests/chaos/oracle.py``) expects of the foreign
rows: every live one exactly once with its last value, no deleted one. It is kept from the
statements the harness ran, never read back from the table. A statement that Delta Spark
refuses for a concurrent commit (its optimistic check lost to a load) changed nothing, and the
model stays as it was.
"""

from __future__ import annotations

import os
import random
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.report import REPORT
from tests.chaos.world import PARTS
from tests.support.spark_conf import DELTA_SPARK_JARS_ENV, delta_spark_conf, session_conf

__all__ = ["DELTA_SPARK_JARS_ENV", "ForeignRows", "delta_spark_conf", "session_conf"]

FOREIGN_ID = re.compile(r"f\d+r\d+")
# What Delta Spark may do on any table of a trial; APPEND and the DML of foreign rows only on
# the main table (the JDBC checkers hold every row to a committed batch's range).
MAINTENANCE = ["optimize", "zorder", "vacuum", "checkpoint", "properties", "rewrite_batch_files"]
FOREIGN_DML = ["append", "append", "delete", "update", "merge"]
# The statements that rewrite the files they touch with dataChange=true (batch files too).
REWRITES = {"delete", "update", "merge", "rewrite_batch_files"}
# Delta's own optimistic concurrency: the statement lost to a concurrent commit, nothing changed.
_CONFLICTS = ("Concurrent", "ProtocolChanged", "MetadataChanged", "DELTA_CONCURRENT")


@dataclass
class ForeignRows:
    """The rows Delta Spark wrote into the main table: id -> (id, n, part) of the live ones,
    and every id it ever wrote (a deleted one seen again is a resurrection, not a stranger)."""

    live: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    ever: set[str] = field(default_factory=set)
    batches: int = 0

    def new_rows(self, r: random.Random, n: int) -> list[tuple[str, int, str]]:
        self.batches += 1
        return [(f"f{self.batches}r{i}", r.randrange(-1000, 1000), r.choice(PARTS)) for i in range(n)]


def _sql_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _table(uri: str) -> str:
    return "delta.`" + uri.replace("`", "``") + "`"


class SparkWriter:
    """Runs one Delta Spark statement at a time on a trial's tables and keeps the model."""

    def __init__(self, spark: Any, foreign: ForeignRows) -> None:
        self.spark = spark
        self.foreign = foreign
        self.columns_added = 0
        # Tables where a DELETE/UPDATE/MERGE committed: it may have rewritten batch files.
        self.rewritten: set[str] = set()

    @contextmanager
    def _conf(self, settings: dict[str, str]) -> Any:
        """Session settings for one statement, put back after it (the session is shared)."""
        before = {k: self.spark.conf.get(k, None) for k in settings}
        for k, v in settings.items():
            self.spark.conf.set(k, v)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    self.spark.conf.unset(k)
                else:
                    self.spark.conf.set(k, v)

    def run(self, what: str, uri: str, r: random.Random, *, drift: bool = False) -> str | None:
        """Run ``what`` on ``uri``; returns ``None``, or the error text of a statement that
        failed for another reason than losing to a concurrent commit (a finding)."""
        try:
            self._run(what, uri, r, drift)
        except Exception as exc:
            text = str(exc)
            if any(c in text for c in _CONFLICTS):
                REPORT.count("faults", f"spark_{what}(lost to a concurrent commit)")
                return None
            return f"Delta Spark {what} on {os.path.basename(uri)}: {type(exc).__name__}: {text[:600]}"
        REPORT.count("faults", f"spark_{what}")
        if what in REWRITES:
            self.rewritten.add(uri)
        return None

    def _run(self, what: str, uri: str, r: random.Random, drift: bool) -> None:
        sql, t = self.spark.sql, _table(uri)
        if what == "append":
            rows = self.foreign.new_rows(r, r.randrange(1, 5))
            df = self.spark.createDataFrame(rows, "id STRING, n INT, part STRING")
            df.write.format("delta").mode("append").save(uri)
            self.foreign.live.update({row[0]: row for row in rows})
            self.foreign.ever.update(row[0] for row in rows)
        elif what in ("delete", "update"):
            ids = self._some_foreign(r)
            where = "id IN (" + ", ".join(_sql_str(i) for i in ids) + ")" if ids else "id = 'f-none'"
            if what == "delete":
                sql(f"DELETE FROM {t} WHERE {where}").collect()
                for i in ids:
                    self.foreign.live.pop(i)
            else:
                sql(f"UPDATE {t} SET n = n + 1 WHERE {where}").collect()
                for i in ids:
                    rid, n, part = self.foreign.live[i]
                    self.foreign.live[i] = (rid, n + 1, part)
        elif what == "merge":
            # Some live foreign rows get a new n, some new ones are inserted.
            changed = [(i, r.randrange(-1000, 1000)) for i in self._some_foreign(r)]
            fresh = self.foreign.new_rows(r, r.randrange(0, 3))
            source = [(i, n, self.foreign.live[i][2]) for i, n in changed] + fresh
            if not source:
                return
            self.spark.createDataFrame(source, "id STRING, n INT, part STRING").createOrReplaceTempView(
                "chaos_merge_source"
            )
            sql(
                f"MERGE INTO {t} AS t USING chaos_merge_source AS s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET n = s.n WHEN NOT MATCHED THEN INSERT (id, n, part) "
                "VALUES (s.id, s.n, s.part)"
            ).collect()
            self.foreign.live.update({row[0]: row for row in source})
            self.foreign.ever.update(row[0] for row in fresh)
        elif what == "optimize":
            sql(f"OPTIMIZE {t}").collect()
        elif what == "zorder":
            sql(f"OPTIMIZE {t} ZORDER BY (n)").collect()
        elif what == "vacuum":
            # Spark lists the table with this parallelism (10000 tasks by default).
            with self._conf(
                {
                    "spark.databricks.delta.retentionDurationCheck.enabled": "false",
                    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
                }
            ):
                sql(f"VACUUM {t} RETAIN 0 HOURS").collect()
        elif what == "checkpoint":
            # Read first: the cached DeltaLog then holds the newest snapshot, which is checkpointed.
            sql(f"DESCRIBE DETAIL {t}").collect()
            jvm = self.spark._jvm
            jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.spark._jsparkSession, uri).checkpoint()
        elif what == "properties":
            props = r.choice(
                [
                    {"delta.checkpointInterval": str(r.choice([2, 3, 10]))},
                    {"chaos.owner": f"team-{r.randrange(100)}"},
                    {"delta.deletedFileRetentionDuration": "interval 1 seconds"},
                    {"delta.checkpoint.writeStatsAsStruct": "true"},
                ]
            )
            body = ", ".join(f"{_sql_str(k)} = {_sql_str(v)}" for k, v in props.items())
            sql(f"ALTER TABLE {t} SET TBLPROPERTIES ({body})").collect()
        elif what == "rewrite_batch_files":
            # The rows stay as they are; the files that hold them (a partition's) are new.
            sql(f"UPDATE {t} SET n = n WHERE part = {_sql_str(r.choice(PARTS))}").collect()
        elif what == "add_columns":
            assert drift, "only the drift table's pipeline adds columns (schema_drift='add_columns')"
            self.columns_added += 1
            sql(f"ALTER TABLE {t} ADD COLUMNS (note{self.columns_added} STRING)").collect()
        else:
            raise ValueError(what)

    def _some_foreign(self, r: random.Random) -> list[str]:
        live = sorted(self.foreign.live)
        return r.sample(live, min(len(live), r.randrange(1, 4))) if live else []
