"""The Spark driver entrypoint: ``spark-submit .../airflow_eod/spark/driver.py --spec SPEC``.

``SPEC`` is a :class:`~airflow_eod.spark.load_spec.LoadSpec` as JSON, a local path (submit
mode writes it under the target table's ``_eod/specs/``, where any driver that can write
the table can read it). The source's credentials come from the environment
(``EOD_SOURCE_USER``, ``EOD_SOURCE_PASSWORD``), never from the spec. The driver prints one
``EOD_RESULT {json}`` line; the submitting operator does not trust it, it asks the table.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

CREDENTIALS_USER_ENV = "EOD_SOURCE_USER"
CREDENTIALS_PASSWORD_ENV = "EOD_SOURCE_PASSWORD"
RESULT_PREFIX = "EOD_RESULT "
ERROR_SUFFIX = ".error.json"


def error_path(spec_path: str) -> str:
    """Where a driver that failed leaves its error, beside its spec, for the operator."""
    return spec_path + ERROR_SUFFIX


def write_error(spec_path: str, exc: BaseException) -> None:
    """Leave ``exc`` as JSON beside the spec: its type, batch and cause survive spark-submit,
    which passes on only an exit code."""
    from airflow_eod.core.errors import BatchError

    data = {
        "type": type(exc).__name__,
        "batch": exc.batch if isinstance(exc, BatchError) else None,
        "cause": exc.cause if isinstance(exc, BatchError) else str(exc),
    }
    from airflow_eod.core.atomic_file import write_private

    try:
        write_private(error_path(spec_path), json.dumps(data))
    except OSError:
        pass  # the operator then reports spark-submit's own error


def read_error(spec_path: str) -> Exception | None:
    """The error a driver left beside ``spec_path``, rebuilt as its airflow-eod type."""
    from airflow_eod.core import errors

    try:
        with open(error_path(spec_path)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    cls = getattr(errors, str(data.get("type")), None)
    cause = str(data.get("cause", ""))
    if isinstance(cls, type) and issubclass(cls, errors.BatchError):
        return cls(data.get("batch"), cause)
    if isinstance(cls, type) and issubclass(cls, errors.EodError):
        return cls(cause)
    return errors.BatchError(data.get("batch"), f"{data.get('type')}: {cause}")


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
    from airflow_eod.sources import Credentials
    from airflow_eod.spark.load_job import run_load
    from airflow_eod.spark.load_spec import LoadSpec
    from airflow_eod.spark.session import get_session

    with open(args.spec) as fh:
        spec = LoadSpec.from_json(fh.read())
    user = os.environ.get(CREDENTIALS_USER_ENV)
    creds = Credentials(user, os.environ.get(CREDENTIALS_PASSWORD_ENV, "")) if user else None
    logging.getLogger(__name__).info(
        "batch %s: generation %d, attempt %s, try %s",
        spec.plan.key,
        spec.generation,
        spec.attempt_id,
        spec.try_number,
    )
    try:
        result = run_load(get_session(submitted=not args.local), spec, credentials=creds)
    except Exception as exc:
        write_error(args.spec, exc)
        raise
    text = json.dumps(result.to_dict(), sort_keys=True)
    if args.result:
        with open(args.result, "w") as fh:
            fh.write(text)
    print(RESULT_PREFIX + text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
