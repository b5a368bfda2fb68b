"""Hostile table content (issue 18, items 25 and 26): whoever can write a table's files must
not be able to make airflow-eod allocate without bound, crash a shared process, or read
outside the table.

Real Delta tables, committed by the real commit engine; then a file of the table is replaced
by what an attacker (or a storage fault) would put there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import stage_data

pytestmark = pytest.mark.security

PIPE = "tests.security"
KEY = "i-20261120T000000Z-20261121T000000Z"

# What `_last_checkpoint` is replaced with: each is JSON Python's decoder takes (or nearly),
# none is anything a Delta writer makes.
HOSTILE_HINTS = {
    "huge_parts": json.dumps({"version": 1, "size": 4, "parts": 100_000_000}),
    "a_list": json.dumps([{"version": 1, "size": 4}]),
    "no_version": json.dumps({"size": 4, "parts": 2}),
    "infinity": '{"version": Infinity, "size": 4}',
    "deep_nesting": '{"version": 1, "size": 4, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
}

# Runs in a child process: every way airflow-eod asks a table, under an address-space cap of
# what the imports took plus 1 GiB (before the fix, the huge parts count alone allocated past
# 2.5 GB before a MemoryError, 27 s later).
_CHILD = r"""
import asyncio, contextlib, io, json, re, resource, sys, time
table, pipeline, key = sys.argv[1:4]
from airflow_eod.core.table_ref import TableRef
from airflow_eod.cli import main
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.sensors.delta_batch import DeltaBatchSensor
from airflow_eod.triggers.delta_batch import DeltaBatchTrigger

vm = int(re.search(r"VmSize:\s+(\d+)", open("/proc/self/status").read()).group(1)) << 10
cap = vm + (1 << 30)
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


async def first_event():
    trigger = DeltaBatchTrigger(
        table_uri=table, pipeline_id=pipeline, batch_key=key, poke_interval=0.1, timeout_at=time.time() + 60
    )
    async for event in trigger.run():
        return event.payload


def run(mode):
    out = {"raised": None}
    err = io.StringIO()
    started = time.monotonic()
    try:
        with contextlib.redirect_stderr(err):
            if mode == "ask":
                ask(TableRef.parse(table), BatchKey(pipeline, key))
            elif mode == "cli":
                out["exit"] = main(["ask", table, "--pipeline", pipeline, "--batch", key])
            elif mode == "trigger":
                out["event"] = asyncio.run(first_event())
            else:
                sensor = DeltaBatchSensor(
                    task_id="confirm", table_uri=table, pipeline_id=pipeline, batch_key=key, retries=2
                )
                sensor.poke({})
    except BaseException as exc:
        out.update(raised=type(exc).__name__, message=str(exc))
    out["seconds"] = time.monotonic() - started
    out["stderr"] = err.getvalue()
    return out


print("RESULT " + json.dumps({mode: run(mode) for mode in ("ask", "cli", "trigger", "sensor")}))
"""


def _table(path: str) -> str:
    """A table of two batches committed by airflow-eod, with a checkpoint (and so a
    ``_last_checkpoint``) written by delta-rs."""
    for day in (20, 21):
        batch = BatchKey(PIPE, f"i-202611{day}T000000Z-202611{day + 1}T000000Z")
        data = pa.table({"id": pa.array(range(day), pa.int64())})
        commit_batch(TableRef.parse(path), batch, 0, *stage_data(path, batch, data))
    DeltaTable(path).create_checkpoint()
    assert os.path.exists(os.path.join(path, "_delta_log", "_last_checkpoint"))
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    return env


@pytest.mark.parametrize("content", sorted(HOSTILE_HINTS))
def test_a_hostile_last_checkpoint_is_one_clear_error_everywhere_in_bounded_memory(
    content: str, table: str
) -> None:
    """Before: the huge parts count made every ask build a list of 100 million checkpoint
    file names (MemoryError after 27 s under this cap, over 2.5 GB without one); a list, a
    missing version, Infinity and deep nesting crashed with TypeError, KeyError,
    OverflowError and RecursionError (a traceback in the CLI, a retried task in the sensor,
    an error event naming no file from the trigger)."""
    _table(table)
    hint = os.path.join(table, "_delta_log", "_last_checkpoint")
    with open(hint, "w") as fh:
        fh.write(HOSTILE_HINTS[content])
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, table, PIPE, KEY],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got: dict[str, Any] = json.loads(lines[0][len("RESULT ") :])

    # The core: the typed error, naming the table and the file, at once.
    ask = got["ask"]
    assert ask["raised"] == "CorruptTableError", ask
    assert hint in ask["message"] and f"the table at {table} is corrupt" in ask["message"]
    # The CLI: exit 2, one line on stderr, no traceback.
    cli = got["cli"]
    assert cli["raised"] is None and cli["exit"] == 2, cli
    assert "Traceback" not in cli["stderr"] and len(cli["stderr"].strip().splitlines()) == 1, cli["stderr"]
    assert hint in cli["stderr"]
    # The trigger: one error event that names the error and the file; the triggerer lives on.
    trigger = got["trigger"]
    assert trigger["raised"] is None, trigger
    assert trigger["event"]["status"] == "error" and trigger["event"]["batch"] == f"{PIPE}/{KEY}"
    assert "CorruptTableError" in trigger["event"]["message"] and hint in trigger["event"]["message"]
    # The sensor: fails the task at once (no retry, no further poke).
    sensor = got["sensor"]
    assert sensor["raised"] == "AirflowFailException", sensor
    assert hint in sensor["message"] and "no retry can fix this" in sensor["message"]
    for mode, result in got.items():
        assert result["seconds"] < 10, (mode, result["seconds"])


def test_the_console_script_reports_a_corrupt_table_on_one_line(table: str) -> None:
    """Before: `airflow-eod status` on a table whose `_last_checkpoint` is a JSON list printed
    a TypeError traceback and exited 1."""
    _table(table)
    with open(os.path.join(table, "_delta_log", "_last_checkpoint"), "w") as fh:
        fh.write(HOSTILE_HINTS["a_list"])
    exe = os.path.join(os.path.dirname(sys.executable), "airflow-eod")
    for command in ("status", "verify"):
        proc = subprocess.run([exe, command, table], capture_output=True, text=True, env=_env(), timeout=300)
        assert proc.returncode == 2, (command, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "_last_checkpoint is not a JSON object" in proc.stderr


def test_a_commit_line_or_a_plan_log_entry_out_of_bounds_is_a_clear_error(table: str) -> None:
    """Every JSON file read from a table is bounded, not only `_last_checkpoint`: a marker
    action nested 100,000 deep in a commit and a plan-log entry nested as deep were a
    RecursionError (and a commit's `txn` without an appId a KeyError) before."""
    from airflow_eod.core.ask import ask
    from airflow_eod.core.delta import log as delta_log
    from airflow_eod.core.errors import CorruptTableError, PlanLogError, UnsafePathError
    from airflow_eod.core.planlog.store import PlanLog

    _table(table)
    os.remove(os.path.join(table, "_delta_log", "_last_checkpoint"))
    for name in os.listdir(os.path.join(table, "_delta_log")):
        if ".checkpoint." in name:
            os.remove(os.path.join(table, "_delta_log", name))
    commit = os.path.join(table, "_delta_log", f"{2:020d}.json")
    for line in ('{"txn": {"version": 0}}', '{"txn": ' + "[" * 100_000 + "]" * 100_000 + "}"):
        with open(commit, "w") as fh:
            fh.write('{"commitInfo": {}}\n' + line + "\n")
        delta_log.clear_cache()
        with pytest.raises(CorruptTableError, match=r"00000000000000000002\.json") as err:
            ask(TableRef.parse(table), BatchKey(PIPE, KEY))
        assert err.value.file == commit and err.value.table == table
    os.remove(commit)
    delta_log.clear_cache()
    plan_log = PlanLog(TableRef.parse(table), PIPE)
    entry = os.path.join(plan_log.root, "intervals", f"{KEY}.json")
    os.makedirs(os.path.dirname(entry), exist_ok=True)
    with open(entry, "w") as fh:
        fh.write("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanLogError, match="nested more than 256 levels"):
        plan_log.get_plan(KEY)
    os.remove(entry)
    os.symlink("/dev/zero", entry)  # read up to its bound, never to an end that never comes
    # Refused before it is opened: the checked join sees the link leads out of the table.
    with pytest.raises(UnsafePathError, match="resolves to /dev/zero"):
        plan_log.get_plan(KEY)


def _append_links(table: str, names: list[str]) -> None:
    """Another writer's commit that adds ``names`` (links made by the caller) as live files."""
    dt = DeltaTable(table)
    now = int(time.time() * 1000)
    adds = [AddAction(name, 1000, {}, now, True, None) for name in names]
    dt.create_write_transaction(adds, mode="append", schema=dt.schema())


def test_verify_never_follows_live_files_linked_out_of_the_table(table: str, tmp_path: Any) -> None:
    """Before: two live files linked to /dev/zero had the same size (0) and verify hashed
    them forever; a link to another tenant's file had its bytes and footer read."""
    _table(table)
    secret = tmp_path / "other-tenant"
    secret.mkdir()
    (secret / "private.parquet").write_bytes(b"PAR1 not yours")
    os.chmod(secret / "private.parquet", 0o600)
    os.symlink("/dev/zero", os.path.join(table, "zero-a.parquet"))
    os.symlink("/dev/zero", os.path.join(table, "zero-b.parquet"))
    os.symlink(str(secret / "private.parquet"), os.path.join(table, "theirs.parquet"))
    os.symlink(str(secret), os.path.join(table, "linked-dir"))
    _append_links(table, ["zero-a.parquet", "zero-b.parquet", "theirs.parquet", "linked-dir/private.parquet"])
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_eod.cli", "verify", table, "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    refused = {tuple(f["paths"]): f for f in report["findings"] if f["kind"] == "file_not_in_table"}
    assert set(refused) == {
        ("zero-a.parquet",),
        ("zero-b.parquet",),
        ("theirs.parquet",),
        ("linked-dir/private.parquet",),
    }
    assert all(f["severity"] == "error" and "symbolic link" in f["message"] for f in refused.values())
    assert "duplicate_file_content" not in {f["kind"] for f in report["findings"]}
    # The batches themselves still verify: each is its own batch's load.
    assert [(b["batch_key"][:11], b["live_rows"]) for b in report["batches"]] == [
        ("i-20261120T", 20),
        ("i-20261121T", 21),
    ]


def test_open_in_table_resolves_nothing_outside_the_table(table: str, tmp_path: Any) -> None:
    """The one door the audit opens data files through: hostile names (``..``, absolute paths,
    URIs, links anywhere on the path, devices, FIFOs) never open a file outside the table.
    Before, the audit opened ``local_file(table, rel)`` with plain ``open``: each of these."""
    from airflow_eod.core.audit.facts import NotInTable, open_in_table

    os.makedirs(os.path.join(table, "eod_data", "p"))
    with open(os.path.join(table, "eod_data", "p", "ok.parquet"), "wb") as fh:
        fh.write(b"ours")
    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"theirs")
    os.symlink(str(outside), os.path.join(table, "eod_data", "p", "link.parquet"))
    os.symlink(str(tmp_path), os.path.join(table, "eod_data", "up"))
    os.mkfifo(os.path.join(table, "eod_data", "p", "fifo.parquet"))
    with open_in_table(TableRef.parse(table), "eod_data/p/ok.parquet") as fh:
        assert fh.read() == b"ours"
    with open_in_table(TableRef.parse(table), os.path.join(table, "eod_data", "p", "ok.parquet")) as fh:
        assert fh.read() == b"ours"
    hostile = [
        "../outside.parquet",
        "eod_data/../../outside.parquet",
        str(outside),
        f"file://{outside}",
        "s3://bucket/outside.parquet",
        "eod_data/p/link.parquet",
        "eod_data/up/outside.parquet",
        "eod_data/p/fifo.parquet",  # would block a plain open() until a writer comes
        "/dev/zero",
        "eod_data//p/ok.parquet",
    ]
    for rel in hostile:
        started = time.monotonic()
        with pytest.raises(NotInTable):
            open_in_table(TableRef.parse(table), rel).close()
        assert time.monotonic() - started < 5, rel
    with pytest.raises(FileNotFoundError):
        open_in_table(TableRef.parse(table), "eod_data/p/gone.parquet")
