"""PNG charts of a run (matplotlib, no display): cost against batch count for the ask, the
commit and planning (log x), load time against rows for eod and plain Spark, and the peer's
increments."""

from __future__ import annotations

import os
import statistics
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator, ScalarFormatter


def _line(ax: Any, points: list[dict[str, Any]], key: str, label: str, style: str = "-o") -> None:
    xs = [p["n"] for p in points if key in p]
    ys = [p[key] for p in points if key in p]
    if xs:
        ax.plot(xs, ys, style, label=label, markersize=4)


def history_chart(series: dict[str, list[dict[str, Any]]], path: str, title: str) -> str | None:
    main = series.get("main history", [])
    retention = series.get("retention history", [])
    jdbc = series.get("jdbc history", [])
    if not (main or retention or jdbc):
        return None
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    _line(ax, main, "ask_oldest_p50", "oldest p50")
    _line(ax, main, "ask_newest_p50", "newest p50")
    _line(ax, main, "ask_oldest_p99", "oldest p99", "--o")
    _line(ax, main, "ask_newest_p99", "newest p99", "--o")
    _line(ax, retention, "ask_oldest_p50", "oldest p50, short-retention table", ":s")
    _line(ax, main, "spark_newest_p50", "newest p50 through Spark (contrast)", "-^")
    ax.axhline(10, color="grey", linestyle=":", linewidth=1)
    ax.axhline(30, color="grey", linestyle="-.", linewidth=1)
    ax.set_yscale("log")
    ax.set_title("the ask (targets: p50 10 ms, p99 30 ms)")
    ax = axes[1]
    _line(ax, main, "commit_p50", "p50")
    _line(ax, main, "commit_p99", "p99", "--o")
    _line(ax, retention, "commit_p50", "p50, retention", ":s")
    ax.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax.set_title("the commit, fixed cost (target 100 ms)")
    ax = axes[2]
    _line(ax, main, "plan_p50", "landing files p50")
    _line(ax, main, "plan_p99", "landing files p99", "--o")
    _line(ax, jdbc, "plan_p50", "jdbc p50")
    _line(ax, jdbc, "protocol_p50", "jdbc p50 less its source queries", ":s")
    ax.axhline(50, color="grey", linestyle=":", linewidth=1)
    ax.set_title("planning the next batch (target 50 ms)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("committed batches in the table")
        ax.set_ylabel("ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_chart(series: dict[str, list[dict[str, Any]]], path: str, title: str) -> str | None:
    if not any(series.values()):
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for fmt, points in series.items():
        if not points:
            continue
        xs = [p["rows"] for p in points]
        ax.plot(xs, [statistics.median(p["plain"]) for p in points], "--o", label=f"{fmt}: plain Spark write")
        ax.plot(xs, [statistics.median(p["eod"]) for p in points], "-s", label=f"{fmt}: airflow-eod load")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows per load")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_ylabel("seconds (median)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def peer_chart(series: dict[str, dict[str, list[float]]], path: str, title: str) -> str | None:
    """One line per engine and case (``{case: {"eod": [...], "stream": [...]}}``)."""
    cases = {name: s for name, s in series.items() if isinstance(s, dict) and s.get("eod")}
    if not cases:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for (name, s), marker in zip(cases.items(), "osd^v", strict=False):
        xs = list(range(1, len(s["eod"]) + 1))
        ax.plot(xs, [v * 1000 for v in s["stream"]], f"--{marker}", label=f"{name}: Structured Streaming")
        ax.plot(xs, [v * 1000 for v in s["eod"]], f"-{marker}", label=f"{name}: airflow-eod load")
    ax.set_xlabel("increment")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("wall time, ms")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(results: dict[str, Any], directory: str) -> list[str]:
    """Draw every chart the run has data for; returns the paths written."""
    mode = results["mode"]
    series = results["series"]
    made = [
        history_chart(
            series.get("history", {}), os.path.join(directory, f"{mode}-history.png"), f"{mode} run"
        ),
        load_chart(
            series.get("load", {}), os.path.join(directory, f"{mode}-load.png"), f"load time ({mode} run)"
        ),
        peer_chart(
            series.get("peer", {}), os.path.join(directory, f"{mode}-peer.png"), f"per increment ({mode} run)"
        ),
    ]
    return [p for p in made if p]
