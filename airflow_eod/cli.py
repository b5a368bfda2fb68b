"""The ``airflow-eod`` console script: what a runbook or a shell script asks of a table.

``airflow-eod status TABLE`` lists, per pipeline, the committed batches with their
generation, table version and rows, and the gaps between an interval pipeline's committed
intervals. ``airflow-eod ask TABLE --pipeline P --batch K`` exits 0 when the batch is
committed, 1 when it was planned (or committed at an older generation) but is not committed
yet, 3 when the table knows no pipeline P, and 4 when P never planned a batch K. ``airflow-eod verify TABLE``
audits the table against the guarantee without trusting its writers
(:mod:`airflow_eod.core.audit.verify`) and exits 1 when it finds an error. All exit 2, with
the reason on stderr, when TABLE holds no Delta table: a mistyped path is not an answer
about a table.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import timedelta

from airflow_eod.core.ask import ask_table
from airflow_eod.core.audit.findings import AuditReport
from airflow_eod.core.audit.status import batch_known, table_status
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.batch import BatchKey, validate_pipeline_id
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import ConfigurationError, EodError
from airflow_eod.core.table_ref import TableRef

COMMITTED, NOT_COMMITTED, NO_TABLE, NO_PIPELINE, NO_BATCH = 0, 1, 2, 3, 4


def _no_table(table: str) -> int:
    """Say on stderr that ``table`` holds no Delta table; the exit code for that."""
    print(
        f"airflow-eod: there is no Delta table at {table} (no _delta_log with a commit); "
        "check the path, or load the first batch to create the table",
        file=sys.stderr,
    )
    return NO_TABLE


def _status(args: argparse.Namespace) -> int:
    if open_table(args.table) is None:
        # A first load that died before its commit leaves plans but no table: say so, since
        # those batch keys are what a runbook needs next.
        for s in table_status(args.table):
            keys = ", ".join(b.batch_key for b in s.pending)
            print(f"airflow-eod: pipeline {s.pipeline_id} planned, never committed: {keys}", file=sys.stderr)
        return _no_table(args.table)
    summaries = table_status(args.table)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "pipeline_id": s.pipeline_id,
                        "batches": [vars(b) for b in s.batches],
                        "gaps": [vars(g) for g in s.gaps],
                    }
                    for s in summaries
                ],
                indent=2,
            )
        )
        return 0
    if not summaries:
        print(f"{args.table}: no airflow-eod pipelines")
        return 0
    for s in summaries:
        rows = sum(b.rows or 0 for b in s.committed)
        gaps = f", {_plural(len(s.gaps), 'GAP')} between committed intervals" if s.gaps else ""
        print(
            f"pipeline {s.pipeline_id}: {len(s.committed)} committed, {len(s.pending)} planned "
            f"but not committed, {rows} rows{gaps}"
        )
        for b in s.batches:
            state = "committed" if b.generation is not None else "NOT COMMITTED"
            print(
                f"  {b.batch_key}  {state}  generation={b.generation}  "
                f"table_version={b.table_version}  rows={b.rows}"
            )
        for g in s.gaps:
            planned = f" (planned, not committed: {', '.join(g.pending)})" if g.pending else ""
            between = f"no committed interval between {g.after} and {g.before}"
            print(f"  GAP  {g.start} to {g.end}: {between}{planned}")
    return 0


def _ask(args: argparse.Namespace) -> int:
    table = open_table(args.table)
    if table is None:
        # "committed": false would read as "not loaded yet" for a path that holds no table.
        return _no_table(args.table)
    answer: dict[str, object] = {
        "pipeline_id": args.pipeline,
        "batch_key": args.batch,
        "committed": False,
        "generation": None,
        "table_version": None,
        "rows": None,
    }
    try:
        validate_pipeline_id(args.pipeline)
    except ConfigurationError as exc:
        return _unknown(answer, "no_such_pipeline", f"{exc}, so no table holds such a pipeline")
    try:
        batch = BatchKey(args.pipeline, args.batch)
    except ConfigurationError as exc:
        return _unknown(answer, "no_such_batch", f"{exc}, so pipeline {args.pipeline} never planned it")
    status = ask_table(table, batch, args.generation)
    answer.update(
        committed=status.committed,
        generation=status.committed_generation,
        table_version=status.table_version,
        rows=status.manifest.rows if status.manifest else None,
    )
    if status.committed:
        answer["state"] = "committed"
        print(json.dumps(answer))
        return COMMITTED
    pipeline_known, batch_planned = batch_known(table, batch, status)
    if not pipeline_known:
        why = (
            f"the table at {args.table} knows no pipeline {args.pipeline} (nothing of it in its plan "
            "log, and no marker of this batch): check the pipeline id (`airflow-eod status` lists them)"
        )
        return _unknown(answer, "no_such_pipeline", why)
    if not batch_planned:
        why = (
            f"pipeline {args.pipeline} never planned a batch {args.batch}: check the key "
            "(`airflow-eod status` lists the batches)"
        )
        return _unknown(answer, "no_such_batch", why)
    answer["state"] = "not_committed"
    print(json.dumps(answer))
    return NOT_COMMITTED


def _unknown(answer: dict[str, object], state: str, why: str) -> int:
    """Print the answer for a pipeline or batch the table does not know (JSON on stdout,
    the reason on stderr); the exit code for that."""
    answer.update(state=state, reason=why)
    print(json.dumps(answer))
    print(f"airflow-eod: {why}", file=sys.stderr)
    return NO_PIPELINE if state == "no_such_pipeline" else NO_BATCH


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _duration(text: str) -> timedelta:
    """``90m``, ``36h``, ``2d``, ``1w`` (or a Delta interval such as ``interval 2 days``)."""
    m = _DURATION.match(text)
    if m:
        return timedelta(**{_UNIT[m.group(2)]: float(m.group(1))})
    try:
        return parse_interval(text)
    except EodError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90m, 36h or 2d") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1], such as 0.8")
    return value


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _print_report(report: AuditReport) -> None:
    checked = f"{report.checked_at:%Y-%m-%d %H:%M:%S %Z}"
    print(f"{report.table_uri} at version {report.table_version} (checked {checked})")
    for b in report.batches:
        print(
            f"  {b.pipeline_id}/{b.batch_key}  generation={b.generation}  table_version={b.table_version}  "
            f"rows={b.recorded_rows} recorded, {b.live_rows} live in {b.live_files} file(s)"
        )
    for title, findings in (("errors", report.errors), ("warnings", report.warnings)):
        if findings:
            print(f"{title}:")
            for f in findings:
                print(f"  [{f.kind}] {f.message}")
    errors, warnings = len(report.errors), len(report.warnings)
    print(
        f"verify: {len(report.batches)} batch{'' if len(report.batches) == 1 else 'es'}, "
        f"{_plural(errors, 'error')}, {_plural(warnings, 'warning')}"
    )


def _verify(args: argparse.Namespace) -> int:
    if open_table(args.table) is None:
        return _no_table(args.table)
    report = audit_table(args.table, stuck_after=args.stuck_after, expiry_warning=args.expiry_warning)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    return 1 if report.errors or (args.strict and report.warnings) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="airflow-eod", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_status = sub.add_parser("status", help="per pipeline: committed batches, generation, version, rows")
    p_status.add_argument("table")
    p_status.add_argument("--json", action="store_true", help="print JSON")
    p_status.set_defaults(func=_status)
    p_ask = sub.add_parser(
        "ask",
        help="ask the table about a batch: exit 0 if it is committed, 1 if planned but not committed, "
        "2 if there is no table (or on an error), 3 if there is no such pipeline, 4 if no such batch was "
        "ever planned",
    )
    p_ask.add_argument("table")
    p_ask.add_argument("--pipeline", required=True)
    p_ask.add_argument("--batch", required=True)
    p_ask.add_argument("--generation", type=int, default=0)
    p_ask.set_defaults(func=_ask)
    p_verify = sub.add_parser(
        "verify",
        help="audit the table against the exactly-once guarantee: exit 0 if it holds, 1 on errors "
        "(or warnings with --strict), 2 if there is no table",
    )
    p_verify.add_argument("table")
    p_verify.add_argument("--json", action="store_true", help="print the report as JSON")
    p_verify.add_argument(
        "--stuck-after",
        type=_duration,
        default=timedelta(days=1),
        metavar="DURATION",
        help="report plans not committed this long after planning (default 1d; e.g. 90m, 36h, 2d)",
    )
    p_verify.add_argument(
        "--expiry-warning",
        type=_fraction,
        default=0.8,
        metavar="FRACTION",
        help="report markers and plans older than this fraction of the retention window (default 0.8)",
    )
    p_verify.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p_verify.set_defaults(func=_verify)
    args = parser.parse_args(argv)
    try:
        args.table = TableRef.parse(args.table)  # parsed once: every command takes the reference
        return int(args.func(args))
    except EodError as exc:
        print(f"airflow-eod: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # the last line of defence, said on one line
        # Content of the table no check foresaw (whoever can write the table controls it):
        # one line naming the table and exit 2, as for a corrupt table, not a traceback a
        # shell script or a runbook step cannot tell from a crash of the tool.
        cause = " ".join(f"{type(exc).__name__}: {exc}".split())
        print(
            f"airflow-eod: cannot read the table at {args.table}: {cause}; the table may hold content "
            "no writer makes (see docs/runbook.md, 'the table at PATH is corrupt')",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
