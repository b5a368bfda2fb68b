"""The Spark driver entrypoint: ``spark-submit .../airflow_eod/spark/driver.py --spec SPEC``.

``SPEC`` is a :class:`~airflow_eod.spark.load_spec.LoadSpec` as JSON, a local path (submit
mode writes it under the target table's ``_eod/specs/``, where any driver that can write
the table can read it), or an object store URI (``s3://.../_eod/specs/...``), read through the
storage seam with the table's storage options. The source's credentials
(``EOD_SOURCE_USER``, ``EOD_SOURCE_PASSWORD``) and the table's storage options (``EOD_STORAGE_OPTIONS``,
a JSON object of delta-rs option names) come from the environment, never from the spec. The
driver prints one ``EOD_RESULT {json}`` line; the submitting operator does not trust it, it
asks the table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_eod.core.storage import Storage

CREDENTIALS_USER_ENV = "EOD_SOURCE_USER"
CREDENTIALS_PASSWORD_ENV = "EOD_SOURCE_PASSWORD"
STORAGE_OPTIONS_ENV = "EOD_STORAGE_OPTIONS"
RESULT_PREFIX = "EOD_RESULT "


def error_path(spec_path: str) -> str:
    """Where a driver that failed leaves its error, beside its spec, for the operator."""
    from airflow_eod.core.spec_files import ERROR_SUFFIX

    return spec_path + ERROR_SUFFIX


# What a driver whose master went away raises on its next Spark call; the cause itself
# ("All masters are unresponsive") is only an INFO line of the driver's log.
_STOPPED_CONTEXT = ("Cannot call methods on a stopped SparkContext", "All masters are unresponsive")


def cause_of(exc: BaseException) -> str:
    """The cause of an error that is not an airflow-eod one, in words: its first line, and
    what a stopped SparkContext means."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip() and line.strip() != ":"]
    first = lines[0] if lines else type(exc).__name__
    if any(marker in text for marker in _STOPPED_CONTEXT):
        return (
            "the driver's SparkContext was stopped before the load ended, most often because "
            "its Spark master cannot be reached or went away ('All masters are unresponsive' "
            "in the driver's log); nothing was committed. Check the master of the Spark "
            f"connection; the task's retries try again ({first})"
        )
    return text


def write_error(
    spec_path: str, exc: BaseException, batch: str | None = None, options: Mapping[str, str] | None = None
) -> None:
    """Leave ``exc`` as JSON beside the spec: its type, batch and cause survive spark-submit,
    which passes on only an exit code.

    :param batch: the batch's label, for an error that does not name it itself.
    :param options: the table's storage options, for a spec on an object store.
    """
    from airflow_eod.core.errors import BatchError

    data = {
        "type": type(exc).__name__,
        "batch": exc.batch if isinstance(exc, BatchError) else batch,
        "cause": exc.cause if isinstance(exc, BatchError) else cause_of(exc),
    }
    try:
        # Beside the spec, in the table's storage, 0600 as the spec is.
        store, key = spec_storage(error_path(spec_path), options)
        store.put(key, json.dumps(data).encode(), private=True)
    except Exception:  # a link refused, a store that does not answer: best effort
        pass  # the operator then reports spark-submit's own error, and the load's stays raised


def storage_options_from_env() -> dict[str, str]:
    """The table's storage options that the submitting task put in the driver's environment
    (:data:`STORAGE_OPTIONS_ENV`); empty when it put none (a local table, a store's default
    credential chain).

    :raises ConfigurationError: for a value that is no JSON object of strings (named, not shown:
        it holds secrets).
    """
    from airflow_eod.core.errors import ConfigurationError

    text = os.environ.get(STORAGE_OPTIONS_ENV)
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
        raise ConfigurationError(f"{STORAGE_OPTIONS_ENV} is not a JSON object of option names to strings")
    return {str(k): v for k, v in parsed.items()}


def spec_storage(path: str, options: Mapping[str, str] | None = None) -> tuple[Storage, str]:
    """The storage and key of a file of the table's ``_eod/specs/`` (a spec, or the error
    file beside it) at ``path``: a local path or an object store URI.

    A spec of a table is reached through the table's storage, whose link check starts at the
    table root: a storage rooted at the spec's own directory never looked at ``_eod`` or
    ``_eod/specs``, which may have become links leading out of the table while Spark ran (I11).
    On an object store the table's storage takes its storage options (``options``).
    """
    from airflow_eod.core.spec_files import SPECS_DIR
    from airflow_eod.core.storage import storage_at

    specs_key = SPECS_DIR.replace(os.sep, "/")
    if "://" in path:
        directory, _, name = path.rpartition("/")
        if directory.endswith("/" + specs_key):
            return storage_at(directory[: -len(specs_key) - 1], options), f"{specs_key}/{name}"
        return storage_at(directory, options), name
    directory, name = os.path.split(path)
    specs = os.path.normpath(directory)
    if os.path.basename(specs) == os.path.basename(SPECS_DIR) and os.path.basename(
        os.path.dirname(specs)
    ) == os.path.dirname(SPECS_DIR):
        return storage_at(os.path.dirname(os.path.dirname(specs))), f"{specs_key}/{name}"
    return storage_at(directory), name


def read_spec(path: str, options: Mapping[str, str] | None = None) -> bytes:
    """The bytes of the spec at ``path`` (bounded): a local file, or an object read through
    the storage seam with the table's storage options."""
    from airflow_eod.core import bounded_json

    if "://" not in path:
        return bounded_json.read_bytes(path, bounded_json.MAX_PLAN_LOG_ENTRY)
    store, key = spec_storage(path, options)
    return store.get(key, limit=bounded_json.MAX_PLAN_LOG_ENTRY)


def error_from(data: bytes | None) -> Exception | None:
    """The error a driver left beside its spec (the file's bytes, read bounded from the
    table's storage by the task), rebuilt as its airflow-eod type; ``None`` for none."""
    from airflow_eod.core import bounded_json, errors

    if data is None:
        return None
    try:
        parsed = bounded_json.loads(data)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    cls = getattr(errors, str(parsed.get("type")), None)
    cause = str(parsed.get("cause", ""))
    if isinstance(cls, type) and issubclass(cls, errors.BatchError):
        return cls(parsed.get("batch"), cause)
    if isinstance(cls, type) and issubclass(cls, errors.EodError):
        return cls(cause)
    return errors.BatchError(parsed.get("batch"), f"{parsed.get('type')}: {cause}")


def application_attempt(context: Any) -> str:
    """The application's attempt (YARN's re-attempts of a cluster-mode driver count up; ``1``
    where the master has no attempts). PySpark does not expose it: asked of the JVM."""
    try:
        option = context._jsc.sc().applicationAttemptId()
        return str(option.get()) if option.isDefined() else "1"
    except Exception:  # a log line's detail must never fail a load
        return "?"


def main(argv: list[str] | None = None) -> int:
    """Load the batch of ``--spec``; write the result to ``--result`` (JSON) if given."""
    parser = argparse.ArgumentParser(prog="airflow_eod.spark.driver")
    parser.add_argument("--spec", required=True, help="path of the LoadSpec JSON")
    parser.add_argument("--result", help="where to write the LoadResult JSON")
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on local[*] (a child process of the tests); without it the master is spark-submit's",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Imported after logging is set up, so that imports' own log lines are formatted too.
    from airflow_eod.core.attempt import rerun_attempt_id
    from airflow_eod.sources import Credentials
    from airflow_eod.spark.load_job import run_load
    from airflow_eod.spark.load_spec import LoadSpec
    from airflow_eod.spark.session import engine_conf, get_session

    # The table's storage options travel in the environment, never in the spec: the spec is
    # read with them (it lies beside the table) and they are re-attached to its table.
    options = storage_options_from_env()
    spec = LoadSpec.from_json(read_spec(args.spec, options).decode(), options)
    user = os.environ.get(CREDENTIALS_USER_ENV)
    creds = Credentials(user, os.environ.get(CREDENTIALS_PASSWORD_ENV, "")) if user else None
    logging.getLogger(__name__).info(
        "batch %s: generation %d, attempt %s, try %s",
        spec.plan.key,
        spec.generation,
        spec.attempt_id,
        spec.settings.try_number,
    )
    try:
        session = get_session(submitted=not args.local, conf=engine_conf(spec.settings.engine))
        context = session.sparkContext
        run = application_attempt(context)
        # The task log shows it (client mode: this line; cluster mode: spark-submit's), so an
        # operator can find the application in YARN's or the master's UI.
        logging.getLogger(__name__).info(
            "batch %s: Spark application %s, attempt %s", spec.plan.key, context.applicationId, run
        )
        if run.isdigit() and int(run) > 1:
            # YARN started this driver again after its first run died: another attempt.
            rerun = rerun_attempt_id(spec.attempt_id, int(run))
            logging.getLogger(__name__).info(
                "batch %s: the cluster's run %s of attempt %s loads as attempt %s",
                spec.plan.key,
                run,
                spec.attempt_id,
                rerun,
            )
            spec = dataclasses.replace(spec, attempt_id=rerun)
        result = run_load(session, spec, credentials=creds)
    except Exception as exc:
        write_error(args.spec, exc, spec.plan.key.label, options)
        raise
    text = json.dumps(result.to_dict(), sort_keys=True)
    if args.result:
        with open(args.result, "w") as fh:
            fh.write(text)
    print(RESULT_PREFIX + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
