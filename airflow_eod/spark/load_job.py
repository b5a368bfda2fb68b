"""The load job: what runs in the Spark driver for one batch, locally or under spark-submit.

It takes its frozen plan as data (a JSON :class:`LoadSpec`), asks the table, reads exactly
the planned slice, writes it, commits it with its marker, and returns a JSON result that
the table, not the exit code, stands behind. ``python -m airflow_eod.spark.load_job
--spec spec.json --result result.json`` is the spark-submit entrypoint.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_eod.core.ask import ask
from airflow_eod.core.cleanup import remove_uncommitted_attempts
from airflow_eod.core.commit import commit_batch
from airflow_eod.core.errors import BatchError, ConfigurationError, EodError
from airflow_eod.core.faults import fault_point
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import Plan
from airflow_eod.core.result import (
    ALREADY_COMMITTED,
    COMMITTED,
    LoadResult,
    decide_after_failure,
    result_from_status,
)
from airflow_eod.sources import source_from_dict

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

ENGINES = ("delta-rs", "delta-spark")
Transform = Callable[["DataFrame"], "DataFrame"]


@dataclass
class LoadSpec:
    """Everything a driver needs to load one planned batch, as plain data.

    :param table_uri: the target Delta table.
    :param plan: the frozen plan (``Plan`` as a dict).
    :param source: the source (its ``to_dict()`` form).
    :param generation: the generation to commit.
    :param partition_by: partition columns for a table this load creates.
    :param transform: ``"module:function"`` applied to the DataFrame before the write.
    :param engine: ``delta-rs`` (default) or ``delta-spark``.
    :param run_id: the Airflow run id, recorded in the manifest.
    :param try_number: the Airflow try number, recorded in the manifest.
    :param table_configuration: table properties for a table this load creates.
    :param attempt_id: unique per attempt; generated when empty.
    """

    table_uri: str
    plan: dict[str, Any]
    source: dict[str, Any]
    generation: int = 0
    partition_by: list[str] = field(default_factory=list)
    transform: str | None = None
    engine: str = "delta-rs"
    run_id: str | None = None
    try_number: int | None = None
    table_configuration: dict[str, str] = field(default_factory=dict)
    attempt_id: str = ""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigurationError(f"engine {self.engine!r} is not one of {ENGINES}")
        if not self.attempt_id:
            self.attempt_id = uuid.uuid4().hex[:16]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> LoadSpec:
        return cls(**json.loads(text))


def resolve_transform(path: str) -> Transform:
    """Import ``"package.module:function"`` (or ``package.module.function``)."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"transform {path!r} cannot be imported: {exc}") from exc
    if not callable(fn):
        raise ConfigurationError(f"transform {path!r} is not callable")
    return fn  # type: ignore[no-any-return]


def run_load(spark: SparkSession, spec: LoadSpec, transform: Transform | None = None) -> LoadResult:
    """Load the planned batch of ``spec`` exactly once.

    :param spark: the driver's SparkSession.
    :param spec: the load, as data.
    :param transform: a callable that overrides ``spec.transform`` (local mode only).
    """
    plan = Plan(**spec.plan)
    batch = plan.key
    source = source_from_dict(spec.source)
    status = ask(spec.table_uri, batch, spec.generation)
    if status.committed:
        log.info(
            "batch %s: already committed (generation %s); writing nothing", batch, status.committed_generation
        )
        remove_uncommitted_attempts(spec.table_uri, status)
        return result_from_status(spec.table_uri, status, ALREADY_COMMITTED)
    fault_point("before_write", try_number=spec.try_number)
    source.verify(plan)
    fn = transform or (resolve_transform(spec.transform) if spec.transform else None)
    try:
        df = source.read(spark, plan)
        if fn is not None:
            df = fn(df)
        manifest = Manifest(
            pipeline_id=batch.pipeline_id,
            batch_key=batch.key,
            generation=spec.generation,
            boundary=plan.boundary,
            input_fingerprint=plan.input_fingerprint,
            rows=0,
            files=0,
            attempt_id=spec.attempt_id,
            engine=spec.engine,
            run_id=spec.run_id,
            try_number=spec.try_number,
        )
        if spec.engine == "delta-spark":
            from airflow_eod.spark.delta_spark_engine import write_with_delta_spark

            rows = df.count()
            manifest = Manifest(**{**asdict(manifest), "rows": rows})
            ours, status = write_with_delta_spark(
                df,
                spec.table_uri,
                batch,
                spec.generation,
                manifest,
                spec.partition_by,
                try_number=spec.try_number,
            )
        else:
            from airflow_eod.spark.staging import stage_dataframe

            staged = stage_dataframe(
                df, spec.table_uri, batch, spec.generation, spec.attempt_id, spec.partition_by
            )
            source.verify(plan)  # an input that changed while Spark read it fails here
            fault_point("after_stage", try_number=spec.try_number)
            manifest = Manifest(**{**asdict(manifest), "rows": staged.rows, "files": len(staged.files)})
            ours, status = commit_batch(
                spec.table_uri,
                batch,
                spec.generation,
                staged,
                manifest,
                table_configuration=spec.table_configuration,
                try_number=spec.try_number,
            )
    except Exception as exc:
        decided = decide_after_failure(spec.table_uri, batch, spec.generation, exc)
        if decided is not None:
            return decided
        if isinstance(exc, EodError):
            raise
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise BatchError(batch.label, f"the load failed and nothing was committed: {first}") from exc
    fault_point("after_commit", try_number=spec.try_number)
    remove_uncommitted_attempts(spec.table_uri, status)
    outcome = COMMITTED if ours else ALREADY_COMMITTED
    log.info("batch %s: %s at table version %s", batch, outcome, status.table_version)
    return result_from_status(spec.table_uri, status, outcome)


def main(argv: list[str] | None = None) -> int:
    """spark-submit entrypoint: ``--spec FILE`` in, ``--result FILE`` (JSON) out."""
    parser = argparse.ArgumentParser(prog="airflow_eod.spark.load_job")
    parser.add_argument("--spec", required=True, help="path of the LoadSpec JSON")
    parser.add_argument("--result", help="where to write the LoadResult JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with open(args.spec) as fh:
        spec = LoadSpec.from_json(fh.read())
    from airflow_eod.spark.session import get_session

    result = run_load(get_session(), spec)
    text = json.dumps(result.to_dict(), sort_keys=True)
    if args.result:
        with open(args.result, "w") as fh:
            fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
