"""Second adversarial review of issue 18 (items 4, 13, 17, 22-28; main at 20b6973): hostile
table content, landing content or a connection against invariant I11 ("nothing outside its
roots": reads, writes and deletes only under the roots, bounds what it reads).

Each test reproduced a defect found on 20b6973 (marked ``xfail(strict=True)`` until the
product was fixed, and passing since); its docstring says what happened. No Spark: real Delta tables committed
by the real commit engine (as in tests/core/test_security_table_content.py), then one file of the
table replaced by what an attacker (or a storage fault) would put there.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from airflow_eod.cli import main
from airflow_eod.core.batch import BatchKey, fingerprint
from airflow_eod.core.delta import log as delta_log
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.jdbc_url import check_jdbc_url, redact_jdbc_url
from tests.support.helpers import stage_data

PIPE = "tests.adv2"
KEY = "i-20261120T000000Z-20261121T000000Z"


def _table(path: str) -> str:
    """Two batches committed by airflow-eod, then a checkpoint written by delta-rs (so the
    ask starts from ``_last_checkpoint`` and the checkpoint's Parquet file)."""
    for day in (20, 21):
        batch = BatchKey(PIPE, f"i-202611{day}T000000Z-202611{day + 1}T000000Z")
        data = pa.table({"id": pa.array(range(day), pa.int64())})
        commit_batch(TableRef.parse(path), batch, 0, *stage_data(path, batch, data))
    DeltaTable(path).create_checkpoint()
    delta_log.clear_cache()
    return path


def _checkpoint(table: str) -> str:
    log_dir = os.path.join(table, "_delta_log")
    (name,) = [n for n in os.listdir(log_dir) if n.endswith(".checkpoint.parquet")]
    return os.path.join(log_dir, name)


def _record(table: str) -> str:
    folder = os.path.join(table, "_eod", "pipelines", PIPE, "batches", KEY)
    (name,) = os.listdir(folder)
    return os.path.join(folder, name)


def _forge_record(table: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite the batch's commit record with ``change`` applied and a valid checksum (the
    checksum is a public SHA-256 of the body: anyone who can write the table can forge one)."""
    path = _record(table)
    with open(path) as fh:
        body = json.load(fh)
    body.pop("checksum")
    change(body)
    body["checksum"] = fingerprint(body)
    os.remove(path)
    with open(path, "w") as fh:
        json.dump(body, fh)


def _rewrite_checkpoint(table: str, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Rewrite the checkpoint's rows with ``change`` applied (every field made nullable)."""
    path = _checkpoint(table)
    old = pq.read_table(path)

    def relax(t: pa.DataType) -> pa.DataType:
        return pa.struct([pa.field(f.name, relax(f.type), True) for f in t]) if pa.types.is_struct(t) else t

    rows = old.to_pylist()
    change(rows)
    schema = pa.schema([pa.field(f.name, relax(f.type), True) for f in old.schema])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _cli(*argv: str) -> tuple[int, str]:
    """``airflow-eod argv`` in this process: (exit code, stderr). An exception escaping ``main``
    (a traceback for the console script) is let through."""
    err = io.StringIO()
    delta_log.clear_cache()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, err.getvalue()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), env.get("PYTHONPATH", "")])
    return env


# -- 1. the checkpoint's Parquet file is opened by path, following links and FIFOs ---------------
@pytest.mark.security
def test_a_checkpoint_that_is_a_fifo_hangs_every_ask_for_ever(table: str) -> None:
    """``_last_checkpoint`` names version 1; its ``00000000000000000001.checkpoint.parquet``
    is replaced by a FIFO. ``_read_checkpoint`` opens it with ``pq.ParquetFile(path)`` (no
    O_NONBLOCK, no regular-file check, unlike every JSON file since ``bounded_json``), and the
    open blocks until a writer comes: ``airflow-eod ask`` never returns (killed here after
    60 s), and in the triggerer ``asyncio.to_thread`` loses a thread of the shared default
    executor for good per such table, past any ``timeout_at``. ``verify`` (table_facts
    ``_checkpoint_markers``, ``pq.read_table(path)``) and ``checkpoint_holds`` open
    checkpoints the same way."""
    _table(table)
    path = _checkpoint(table)
    os.remove(path)
    os.mkfifo(path)
    exe = os.path.join(os.path.dirname(sys.executable), "airflow-eod")
    try:
        proc = subprocess.run(
            [exe, "ask", table, "--pipeline", PIPE, "--batch", KEY],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("airflow-eod ask on a table whose checkpoint is a FIFO did not return in 60 s")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.security
def test_a_checkpoint_linked_out_of_the_table_is_read(table: str, tmp_path: Any) -> None:
    """The checkpoint is moved out of the table and a symbolic link left in its place (to
    another tenant's file, say). Commits and ``_last_checkpoint`` are opened with O_NOFOLLOW
    now, but the checkpoint is read through the link: the ask answers from a file outside
    the table (invariant I11) instead of refusing it as a corrupt table."""
    _table(table)
    path = _checkpoint(table)
    outside = str(tmp_path / "elsewhere.parquet")
    shutil.move(path, outside)
    os.symlink(outside, path)
    code, err = _cli("ask", table, "--pipeline", PIPE, "--batch", KEY)
    assert code == 2, f"the ask read {outside} through the link and answered (exit {code})"
    assert "link" in err


# -- 2. hostile values of the right JSON shape crash the CLI with a traceback --------------------
def _extra_key(table: str) -> None:
    _forge_record(table, lambda body: body.update(note="x"))


def _version_as_text(table: str) -> None:
    _forge_record(table, lambda body: body.update(table_version="0"))


def _manifest_extra_key(table: str) -> None:
    _forge_record(table, lambda body: body["manifest"].update(note="x"))


def _null_marker_version(table: str) -> None:
    def change(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row.get("txn"):
                row["txn"]["version"] = None

    _rewrite_checkpoint(table, change)


def _null_marker_app_id(table: str) -> None:
    def change(rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if row.get("txn"):
                row["txn"]["appId"] = None

    _rewrite_checkpoint(table, change)


def _file_among_pipelines(table: str) -> None:
    with open(os.path.join(table, "_eod", "pipelines", "notes.txt"), "w") as fh:
        fh.write("a note someone left\n")


CRASHES = {
    # (what is done to the table, the command): the exception main() lets out today.
    "record_extra_key-ask": (
        _extra_key,
        "ask",
        "TypeError: CommitRecord.__init__() got an unexpected keyword",
    ),
    "record_extra_key-status": (_extra_key, "status", "the same TypeError"),
    "record_version_as_text-ask": (_version_as_text, "ask", "TypeError: '<=' not supported"),
    "manifest_extra_key-ask": (
        _manifest_extra_key,
        "ask",
        "TypeError: Manifest.__init__() got an unexpected",
    ),
    "checkpoint_null_marker_version-ask": (
        _null_marker_version,
        "ask",
        "TypeError: int() argument ... NoneType",
    ),
    "checkpoint_null_marker_version-verify": (_null_marker_version, "verify", "the same TypeError"),
    "checkpoint_null_marker_app_id-verify": (
        _null_marker_app_id,
        "verify",
        "AttributeError: NoneType .split",
    ),
    "file_among_pipelines-status": (
        _file_among_pipelines,
        "status",
        "NotADirectoryError: .../notes.txt/loaded",
    ),
    "file_among_pipelines-verify": (
        _file_among_pipelines,
        "verify",
        "NotADirectoryError: .../notes.txt/batches",
    ),
}


@pytest.mark.security
@pytest.mark.parametrize("case", sorted(CRASHES))
def test_hostile_table_content_of_the_right_shape_is_one_clear_error_not_a_traceback(
    case: str, table: str
) -> None:
    """Item 25 promised "corrupt content ... report a corrupt table as one clear error (exit
    2) in the CLI". The bounds catch what is not JSON or too big; values of the right JSON
    shape but the wrong type or keys still escape ``main`` (only ``EodError`` is caught), so the
    console script prints a traceback and exits 1 (see ``CRASHES`` for each). The commit
    record's checksum does not help: it is a public SHA-256 of the body. The sensor retries
    these (they are no ``CorruptTableError``) instead of failing at once."""
    change, command, today = CRASHES[case]
    _table(table)
    change(table)
    argv = [command, table] + (["--pipeline", PIPE, "--batch", KEY] if command == "ask" else [])
    try:
        code, err = _cli(*argv)
    except Exception as exc:
        pytest.fail(f"airflow-eod {command} raised {type(exc).__name__}: {exc} (today: {today})")
    if case.startswith("file_among_pipelines"):
        # A file beside the pipelines is no pipeline: passed over, as a .DS_Store is (see the
        # stray-entry test below), and the table's real pipeline still answers.
        assert code == 0 and not err, err
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1, err


# -- 3. a plan-log entry within its size cap takes gigabytes to parse -----------------------------
_CHILD = r"""
import json, resource, sys
table, pipeline, key = sys.argv[1:4]
from airflow_eod.core.table_ref import TableRef
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
out = {"raised": None}
try:
    ask(TableRef.parse(table), BatchKey(pipeline, key))
except BaseException as exc:
    out.update(raised=type(exc).__name__, mro=[c.__name__ for c in type(exc).__mro__])
out["grew"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
print("RESULT " + json.dumps(out))
"""


@pytest.mark.security
def test_a_commit_record_within_its_size_cap_takes_gigabytes_to_parse(table: str) -> None:
    """A commit record is a few hundred bytes plus its file list, but ``PlanLog._read`` accepts
    up to ``MAX_PLAN_LOG_ENTRY`` (256 MB) and ``json.loads`` it whole before the checksum is
    even looked at. JSON of empty objects (``[{},{},...]``) grows about 45x when parsed: this
    40 MB record took 1.9 GB of peak RSS for one ask (measured: 370 MB before, 2232 MB after),
    and one at the cap takes about 12 GB. Every ask of the batch pays it, including the
    trigger's, inside the shared triggerer: the same harm as item 25's ``parts`` count. Here
    one ask in a child process must end in a clear error (it does: a PlanLogError once the
    checksum is found missing) having grown the process by less than 512 MB (it grows it by
    about 1.9 GB)."""
    _table(table)
    path = _record(table)
    with open(path) as fh:
        body = json.load(fh)
    text = json.dumps(dict(body, pad="PAD")).replace(
        '"PAD"', "[" + ",".join(["{}"] * ((40 << 20) // 3)) + "]"
    )
    os.remove(path)
    with open(path, "w") as fh:
        fh.write(text)
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, table, PIPE, KEY],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    got = json.loads(line[len("RESULT ") :])
    # A clear error is what a record that is no record deserves, and reading it may cost a
    # small multiple of its bytes, not gigabytes.
    assert got["grew"] < 512 << 20, f"one ask grew the process by {got['grew'] >> 20} MB"
    assert "EodError" in got.get("mro", []), got


# -- 4. the JDBC URL check is still a deny-list --------------------------------------------------
LEAKED_URLS = [
    # MySQL Connector/J multi-factor authentication: password1, password2, password3.
    "jdbc:mysql://db:3306/shop?password1=s3cret",
    # Amazon Redshift / Athena IAM credentials in the URL.
    "jdbc:redshift:iam://cluster.example:5439/dev;AccessKeyID=AKIAEXAMPLE;SecretAccessKey=s3cret",
    "jdbc:awsathena://athena.us-east-1.amazonaws.com:443;SessionToken=s3cret",
    # Databricks OAuth machine-to-machine: OAuth2Secret.
    "jdbc:databricks://host:443;httpPath=/sql/1;AuthMech=11;Auth_Flow=1;OAuth2ClientId=app;OAuth2Secret=s3cret",
    # Google BigQuery (Simba): OAuthAccessToken, OAuthRefreshToken, OAuthPvtKey.
    "jdbc:bigquery://https://www.googleapis.com/bigquery/v2:443;ProjectId=p;OAuthType=2;OAuthAccessToken=s3cret",
    "jdbc:bigquery://https://www.googleapis.com/bigquery/v2:443;ProjectId=p;OAuthType=1;OAuthRefreshToken=s3cret",
]


@pytest.mark.security
@pytest.mark.parametrize("url", LEAKED_URLS)
def test_a_jdbc_url_with_a_documented_driver_secret_property_is_refused(url: str) -> None:
    """Item 27: "Refuse credentials in every form the drivers take". The check is still a
    list of names (``_SECRET_KEYS``, matched whole or after a ``.``/``_``/``-`` prefix): these
    documented driver properties carry a password, an AWS secret key or an OAuth token and
    pass ``check_jdbc_url``, so the secret is stored in the plan log and the submit spec, and
    ``redact_jdbc_url`` shows it in messages."""
    assert "s3cret" not in redact_jdbc_url(url), redact_jdbc_url(url)
    with pytest.raises(ConfigurationError):
        check_jdbc_url(url)


# -- 5. a healthy table's status refused for a stray entry ---------------------------------------
@pytest.mark.guarantee
@pytest.mark.parametrize("name", [".DS_Store", "old backup"])
def test_status_of_a_healthy_table_fails_for_a_stray_entry_beside_its_pipelines(
    name: str, table: str
) -> None:
    """A Finder ``.DS_Store`` (a share browsed from a Mac) or a directory someone copied aside
    in ``_eod/pipelines/``: ``ask`` and ``verify`` pass over it (verify: exit 0, no finding),
    but ``airflow-eod status`` exits 2 with "pipeline id '.DS_Store' is not valid" and shows
    nothing of the table's real pipelines (``table_status._known_keys`` builds a ``PlanLog``
    of every entry; ``read_plan_log_facts`` skips what is no pipeline id)."""
    _table(table)
    where = os.path.join(table, "_eod", "pipelines", name)
    if name.startswith("."):
        with open(where, "w") as fh:
            fh.write("\0\0\0\1Bud1")
    else:
        os.makedirs(where)
    assert _cli("verify", table)[0] == 0
    code, err = _cli("status", table)
    assert code == 0, err


# -- 6. the deltalake fallback follows links out of the table -----------------------------------
@pytest.mark.security
def test_the_deltalake_fallback_reads_a_commit_linked_out_of_the_table(table: str, tmp_path: Any) -> None:
    """A log this reader "does not know how to read in a bounded way" is handed whole to
    ``deltalake.DeltaTable`` (``_from_deltalake``), which follows links and bounds nothing. One
    empty file named ``x.checkpoint.y`` in ``_delta_log/`` (with no ``_last_checkpoint``) is
    enough to get there. Commit 2 is then a link to a file outside the table: the fast reader
    refuses it (O_NOFOLLOW), but delta-rs reads it, and the ask answers from it (snapshot
    version 2, the outside file's ``metaData``), where it should refuse the table."""
    for day in (20, 21):
        batch = BatchKey(PIPE, f"i-202611{day}T000000Z-202611{day + 1}T000000Z")
        commit_batch(
            TableRef.parse(table),
            batch,
            0,
            *stage_data(table, batch, pa.table({"id": pa.array(range(day), pa.int64())})),
        )
    log_dir = os.path.join(table, "_delta_log")
    with open(os.path.join(log_dir, "00000000000000000000.json")) as fh:
        meta = next(line for line in fh if line.startswith('{"metaData"'))
    outside = str(tmp_path / "another-tenants-commit.json")
    with open(outside, "w") as fh:
        fh.write(meta.replace('"description":null', '"description":"read from outside the table"'))
    os.symlink(outside, os.path.join(log_dir, "00000000000000000002.json"))
    open(os.path.join(log_dir, "x.checkpoint.y"), "w").close()
    delta_log.clear_cache()
    from airflow_eod.core.delta.table import open_table

    try:
        opened = open_table(TableRef.parse(table))
    except Exception as exc:  # refused: what should happen
        assert "link" in str(exc) or "not a Delta commit" in str(exc), exc
        return
    assert opened is None or opened.version() < 2, (
        f"the table was read through the link: version {opened.version()}, "
        f"description {opened.metadata().description!r}"
    )
