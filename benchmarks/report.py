"""The printed table, the results JSON and the README section of a run."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from benchmarks.common import Row

COLUMNS = ("area", "figure", "value", "unit", "target", "ratio", "status", "note")
_COUNT_UNITS = {"bytes", "files", "markers", "requests", "batches", "rows"}


def fmt_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit in _COUNT_UNITS:
        return f"{round(value):,}"
    if unit == "ms":
        return f"{value:.1f}"
    return f"{value:.2f}"


def cells(r: Row) -> list[str]:
    return [
        r.area,
        r.figure,
        fmt_value(r.value, r.unit),
        r.unit,
        r.target,
        "" if r.ratio is None else f"{r.ratio:.2f}x",
        r.status,
        r.note,
    ]


def text_table(rows: list[Row]) -> str:
    body = [cells(r) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(COLUMNS)]
    widths[-1] = len(COLUMNS[-1])  # the note runs on, unpadded
    line = "  ".join(h.ljust(w) for h, w in zip(COLUMNS, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    right = {2, 5}
    for b in body:
        out.append(
            "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(b, widths, strict=True))
            )
        )
    return "\n".join(line.rstrip() for line in out)


def markdown_table(rows: list[Row]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(r)) + " |")
    return "\n".join(out)


def summary(rows: list[Row]) -> str:
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("PASS", "MISS", "ERROR")}
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def write_json(results: dict[str, Any], path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
        fh.write("\n")


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"{m['cores']} cores ({m['cpu']}), {m['ram_gib']} GiB RAM, {m['os']}; Python {m['python']}, "
        f"Java `{m['java']}`, pyspark {m['pyspark']}, deltalake {m['deltalake']}, pyarrow {m['pyarrow']}; "
        f"Spark `{m.get('spark_master', '?')}` "
        f"(default parallelism {m.get('spark_default_parallelism', '?')}); "
        f"1-minute load average {m['load_average_at_start'][0]:.1f} at the start and "
        f"{m.get('load_average_at_end', [float('nan')])[0]:.1f} at the end (the machine is shared); "
        f"code at commit `{m['commit']}` with {m['working_tree_changes']} tracked file(s) "
        "changed in the working tree"
    )


def readme_section(results: dict[str, Any], charts: list[str]) -> str:
    mode = results["mode"]
    rows = [Row(**r) for r in results["rows"]]
    command = "make bench QUICK=1" if mode == "quick" else "make bench"
    minutes, seconds = divmod(round(results["duration_s"]), 60)
    lines = [
        f"### {'QUICK' if mode == 'quick' else 'Full'} run (`{command}`)",
        "",
        f"Ran {results['started']} for {minutes} min {seconds} s (areas: {', '.join(results['areas'])}); "
        f"{summary(rows)}.",
        "",
        f"Machine: {machine_line(results['machine'])}.",
        "",
    ]
    lines += [f"![{os.path.basename(c)}](results/{os.path.basename(c)})" for c in charts]
    lines += ["", markdown_table(rows), ""]
    return "\n".join(lines)


def update_readme(readme: str, mode: str, section: str) -> None:
    begin, end = f"<!-- results:{mode}:begin -->", f"<!-- results:{mode}:end -->"
    with open(readme) as fh:
        text = fh.read()
    block = f"{begin}\n{section}\n{end}"
    if begin in text and end in text:
        text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(readme, "w") as fh:
        fh.write(text)
