"""The ask, the commit, planning and state against the number of batches a table holds.

Three histories are grown through the real engine (:mod:`benchmarks.histories`) and
measured at checkpoints along the way (100, 1,000, 10,000 batches), never rebuilt:

- ``main``: a landing-files pipeline with the provider's default table properties. The
  ask is timed for the oldest and the newest batch, through delta-rs and, for contrast,
  through a Spark session (:mod:`benchmarks.spark_ask`); then the next ``window`` batches'
  planning and commits are timed.
- ``retention``: the same pipeline on a table whose ``delta.logRetentionDuration`` and
  ``delta.setTransactionRetentionDuration`` are short (30 seconds), so log entries and
  markers expire while the history grows: its state is compared with ``main``'s, and its
  oldest batch is asked after its marker expired.
- ``jdbc``: a JDBC-incremental pipeline against a real PostgreSQL, for its planning.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING, Any

from airflow_eod.core.ask import ask
from airflow_eod.core.table_ref import TableRef
from benchmarks import pg as pgmod
from benchmarks.common import Row, Settings, fmt_int, ms, progress, ratio_of, row, timed
from benchmarks.histories import (
    History,
    JdbcHistory,
    LandingHistory,
    Measured,
    forget_readings,
    guarded,
    measure_state,
)
from benchmarks.spark_ask import spark_marker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ASK_P50_MS, ASK_P99_MS, COMMIT_MS, PLAN_MS, GROWTH = 10.0, 30.0, 100.0, 50.0, 2.0
SETTLE_S = 3.0


def _asks(history: History, m: Measured, reps: int) -> None:
    oldest, newest = history.key_of(0), history.key_of(m.n - 1)
    for key in (oldest, newest):
        if not ask(TableRef.parse(history.table), key).committed:
            raise RuntimeError(f"the table does not answer committed for {key}")
    for key in (oldest, newest):
        timed(lambda k=key: ask(TableRef.parse(history.table), k), 0, warmup=10)  # type: ignore[misc]
    for _ in range(reps):  # interleaved, so both see the same machine load
        forget_readings()
        m.ask_oldest += timed(lambda: ask(TableRef.parse(history.table), oldest), 1)
        forget_readings()
        m.ask_newest += timed(lambda: ask(TableRef.parse(history.table), newest), 1)
    for _ in range(reps):
        m.warm_oldest += timed(lambda: ask(TableRef.parse(history.table), oldest), 1)
        m.warm_newest += timed(lambda: ask(TableRef.parse(history.table), newest), 1)


def _spark_asks(spark: SparkSession, history: History, m: Measured, reps: int) -> None:
    oldest, newest = history.key_of(0), history.key_of(m.n - 1)
    for key in (oldest, newest):
        found = spark_marker(spark, history.table, key.app_id)  # also the warm-up
        if found != 0:
            raise RuntimeError(f"Spark read marker {found!r} for {key}, expected 0")
    for _ in range(reps):
        m.spark_oldest += timed(lambda: spark_marker(spark, history.table, oldest.app_id), 1)
        m.spark_newest += timed(lambda: spark_marker(spark, history.table, newest.app_id), 1)


def _grow_and_measure(
    history: History, settings: Settings, spark: SparkSession | None, *, asks: bool, window: int
) -> None:
    for n in settings.checkpoints:
        if str(n) in history.progress.measured:
            continue
        if history.progress.built > n:
            progress(f"{history.name}: resumed past {fmt_int(n)} batches; that checkpoint is not measured")
            continue
        history.grow(n)
        m = Measured(n)
        progress(f"{history.name}: measuring at {fmt_int(n)} batches")
        guarded(m, "state", lambda m=m: m.state.update(measure_state(history.table)))  # type: ignore[misc]
        if asks:
            guarded(m, "ask", lambda m=m: _asks(history, m, settings.asks))  # type: ignore[misc]
        if spark is not None:
            guarded(m, "ask through Spark", lambda m=m: _spark_asks(spark, history, m, settings.spark_asks))  # type: ignore[misc]
            time.sleep(SETTLE_S)  # let the JVM's after-work (GC, cleaners) pass before timing again
        guarded(m, "plan and commit", lambda m=m: history.window(m, window))  # type: ignore[misc]
        history.progress.measured[str(n)] = m
        history.save()


def run(settings: Settings, spark: SparkSession, work: str, resume: bool) -> tuple[list[Row], dict[str, Any]]:
    """Grow and measure the three histories; ``(rows, chart series)``."""
    main = LandingHistory("main history", os.path.join(work, "main"), {}, resume)
    _grow_and_measure(main, settings, spark, asks=True, window=settings.window)
    config = {
        "delta.logRetentionDuration": settings.retention,
        "delta.setTransactionRetentionDuration": settings.retention,
    }
    retention = LandingHistory("retention history", os.path.join(work, "retention"), config, resume)
    _grow_and_measure(retention, settings, None, asks=True, window=settings.window)
    jdbc: JdbcHistory | None = None
    jdbc_error = ""
    try:
        server = pgmod.start()
    except pgmod.PostgresUnavailable as exc:
        jdbc_error = f"PostgreSQL could not be started: {exc}"
        progress(jdbc_error)
    else:
        try:
            pgmod.create_source_table(server)
            jdbc = JdbcHistory("jdbc history", os.path.join(work, "jdbc"), server, spark, resume)
            _grow_and_measure(jdbc, settings, None, asks=False, window=settings.jdbc_plans)
        finally:
            server.stop()
    rows = (
        _ask_rows(main, "", settings)
        + _spark_rows(main, settings)
        + _ask_rows(retention, f"retention {_short(settings.retention)}: ", settings)
    )
    rows += _commit_rows(main, "", settings) + _commit_rows(
        retention, f"retention {_short(settings.retention)}: ", settings
    )
    rows += _plan_rows(main, "landing files", settings)
    rows += _jdbc_rows(jdbc, settings, jdbc_error)
    rows += _state_rows(main, retention, settings)
    rows += [_build_row(h) for h in (main, retention, jdbc) if h is not None]
    series = {h.name: _series(h) for h in (main, retention, jdbc) if h is not None}
    complete = jdbc is not None and all(
        str(n) in h.progress.measured for h in (main, retention, jdbc) for n in settings.checkpoints
    )
    if complete:  # an incomplete set stays for --resume
        shutil.rmtree(work, ignore_errors=True)
    return rows, series


def _short(interval: str) -> str:
    parts = interval.split()
    return f"{parts[1]} {parts[2][0]}" if len(parts) == 3 else interval


def _measured(history: History, n: int) -> Measured | None:
    return history.progress.measured.get(str(n))


def _missing(area: str, figure: str, unit: str, m: Measured | None, what: str) -> Row:
    errors = "; ".join(e for e in (m.errors if m else []) if e.startswith(what)) or "not measured"
    return Row(area, figure, None, unit, note=errors, status="ERROR")


def _pair_rows(
    history: History,
    settings: Settings,
    area: str,
    label: str,
    attr: str,
    limits: tuple[float | None, float | None],
    growth: tuple[float | None, float | None],
    what: str,
    note: str = "",
) -> list[Row]:
    """p50 and p99 rows of samples ``attr`` at each checkpoint, ratios against the first."""
    out: list[Row] = []
    first = _measured(history, settings.checkpoints[0])
    base = ms(getattr(first, attr)) if first is not None and getattr(first, attr) else (None, None)
    for n in settings.checkpoints:
        m = _measured(history, n)
        samples = getattr(m, attr) if m is not None else []
        for i, stat in enumerate(("p50", "p99")):
            figure = f"{label}{stat}, {fmt_int(n)} batches"
            if not samples:
                out.append(_missing(area, figure, "ms", m, what))
                continue
            value = ms(samples)[i]
            later = n != settings.checkpoints[0]
            out.append(
                row(
                    area,
                    figure,
                    value,
                    "ms",
                    limit=limits[i],
                    ratio=ratio_of(value, base[i]) if later else None,
                    ratio_limit=growth[i] if later else None,
                    baseline=f"@{fmt_int(settings.checkpoints[0])}",
                    note=f"n={len(samples)}" + (note if i == 0 else "")
                    if n == settings.checkpoints[0]
                    else "",
                )
            )
    return out


def _ask_rows(history: History, prefix: str, settings: Settings) -> list[Row]:
    out: list[Row] = []
    for which in ("oldest", "newest"):
        out += _pair_rows(
            history,
            settings,
            "ask",
            f"{prefix}{which} batch, ",
            f"ask_{which}",
            (ASK_P50_MS, ASK_P99_MS),
            (GROWTH, GROWTH),
            "ask",
            "; a task's first ask (no cached reading)",
        )
    for which in ("oldest", "newest"):
        for n in settings.checkpoints:
            m = _measured(history, n)
            samples = getattr(m, f"warm_{which}") if m is not None else []
            if samples:
                out.append(
                    row(
                        "ask",
                        f"{prefix}{which} batch, warm (cached reading), p50, {fmt_int(n)} batches",
                        ms(samples)[0],
                        "ms",
                        note="a later ask in the same process (information)",
                    )
                )
    return out


def _spark_rows(history: History, settings: Settings) -> list[Row]:
    out: list[Row] = []
    for n in settings.checkpoints:
        m = _measured(history, n)
        for which in ("oldest", "newest"):
            figure = f"through Spark, {which} batch, p50, {fmt_int(n)} batches"
            spark_s = getattr(m, f"spark_{which}") if m is not None else []
            eod_s = getattr(m, f"ask_{which}") if m is not None else []
            if not spark_s:
                out.append(_missing("ask", figure, "ms", m, "ask through Spark"))
                continue
            value = ms(spark_s)[0]
            out.append(
                row(
                    "ask",
                    figure,
                    value,
                    "ms",
                    ratio=ratio_of(value, ms(eod_s)[0] if eod_s else None),
                    baseline="the delta-rs ask p50",
                    note="spark.read of checkpoint + later commits (no Delta jars)",
                )
            )
    return out


def _commit_rows(history: History, prefix: str, settings: Settings) -> list[Row]:
    out = _pair_rows(
        history, settings, "commit", prefix, "commit", (COMMIT_MS, None), (GROWTH, None), "plan and commit"
    )
    n = settings.checkpoints[-1]
    m = _measured(history, n)
    if m is not None and m.checkpoint_commit:
        out.append(
            row(
                "commit",
                f"{prefix}commit that also writes the Delta checkpoint, max, {fmt_int(n)} batches",
                max(m.checkpoint_commit) * 1000,
                "ms",
                note=f"{len(m.checkpoint_commit)} of {len(m.commit)} commits (every 100th); in p50/p99 above",
            )
        )
    return out


def _plan_rows(history: History, label: str, settings: Settings) -> list[Row]:
    return _pair_rows(
        history, settings, "planning", f"{label}, ", "plan", (PLAN_MS, None), (None, None), "plan and commit"
    )


def _jdbc_rows(history: JdbcHistory | None, settings: Settings, error: str) -> list[Row]:
    if history is None:
        return [Row("planning", "jdbc incremental", None, "ms", note=error, status="ERROR")]
    out = _plan_rows(history, "jdbc incremental", settings)
    for n in settings.checkpoints:
        m = _measured(history, n)
        if m is None or not m.plan:
            continue
        query = ms(m.query)[0]
        protocol = ms([p - q for p, q in zip(m.plan, m.query, strict=True)])[0]
        out.append(
            row(
                "planning",
                f"jdbc: its source query (connect + one statement), p50, {fmt_int(n)} batches",
                query,
                "ms",
                note="part of the figure above",
            )
        )
        out.append(
            row(
                "planning",
                f"jdbc: planning less the source queries, p50, {fmt_int(n)} batches",
                protocol,
                "ms",
                note="plan log, claims and the ask",
            )
        )
    return out


STATE_FIGURES = (
    ("log_bytes", "_delta_log bytes", "bytes"),
    ("log_files", "_delta_log files", "files"),
    ("log_commits", "_delta_log JSON commits", "files"),
    ("checkpoint_bytes", "newest checkpoint bytes", "bytes"),
    ("checkpoint_markers", "txn markers in the newest checkpoint", "markers"),
    ("plan_log_bytes", "plan log (_eod/pipelines/) bytes", "bytes"),
    ("plan_log_files", "plan log (_eod/pipelines/) files", "files"),
    ("index_bytes", "checkpoint indexes (_eod/checkpoints/, newest 3) bytes", "bytes"),
    ("index_files", "checkpoint indexes (_eod/checkpoints/, newest 3) files", "files"),
)


def _state_rows(main: History, retention: History, settings: Settings) -> list[Row]:
    out: list[Row] = []
    window = _short(settings.retention)
    for n in settings.state_checkpoints:
        base, short = _measured(main, n), _measured(retention, n)
        for key, label, unit in STATE_FIGURES:
            plain = base.state.get(key) if base is not None else None
            ret = short.state.get(key) if short is not None else None
            missing = (
                "no checkpoint yet (the first is at version 100)" if key.startswith("checkpoint") else ""
            )
            out.append(
                row(
                    "state",
                    f"{label}, {fmt_int(n)} batches",
                    plain,
                    unit,
                    note="default properties" if plain is not None else missing,
                )
            )
            out.append(
                row(
                    "state",
                    f"{label}, {fmt_int(n)} batches, retention {window}",
                    ret,
                    unit,
                    ratio=ratio_of(ret, plain),
                    baseline="default properties" if ret is not None else "",
                    note="" if ret is not None else missing,
                )
            )
    return out


def _build_row(history: History) -> Row:
    p = history.progress
    resumed = f"; resumed at {fmt_int(p.resumed_at)} batches" if p.resumed_at else ""
    return row(
        "history",
        f"build {history.name}: {fmt_int(p.built)} batches (plan + stage + commit)",
        p.build_seconds,
        "s",
        note=f"{p.build_seconds / max(p.built, 1) * 1000:.0f} ms per batch{resumed}",
    )


def _series(history: History) -> list[dict[str, Any]]:
    out = []
    for key in sorted(history.progress.measured, key=int):
        m = history.progress.measured[key]
        point: dict[str, Any] = {"n": m.n, "errors": m.errors, **m.state}
        for attr in (
            "ask_oldest",
            "ask_newest",
            "warm_oldest",
            "warm_newest",
            "spark_oldest",
            "spark_newest",
            "plan",
            "query",
            "commit",
        ):
            samples = getattr(m, attr)
            if samples:
                point[f"{attr}_p50"], point[f"{attr}_p99"] = ms(samples)
        if m.plan and any(m.query):
            point["protocol_p50"], point["protocol_p99"] = ms(
                [p - q for p, q in zip(m.plan, m.query, strict=True)]
            )
        out.append(point)
    return out
