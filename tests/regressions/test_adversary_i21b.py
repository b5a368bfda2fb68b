"""Second adversarial review of issue 21: landing prefixes on an object store (SeaweedFS S3).

Each test asserts the behaviour the design asks for (DESIGN.md sections 2-3: I3 frozen input,
I6 clear errors, I7 no wedge, I11 nothing outside its roots) and fails on the code it was
written against (3337ad9). Keys that obstore will not write (a trailing ``/``, a control
character) are written with a plain SigV4-signed ``PutObject`` (:func:`_raw_put`): an S3
client that allows them (the AWS console's "Create folder", boto3, the CLI) is what drops them
into a landing prefix.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from typing import Any

import pytest

from airflow_eod.core.errors import BatchError, BatchRefusedError, ConfigurationError, EodError
from airflow_eod.core.storage import storage_at
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource
from tests.support.helpers import ORDERS_DDL, interval_plan, plan_for
from tests.support.s3_raw import raw_put as _raw_put

pytestmark = [pytest.mark.objectstore]


@pytest.fixture
def prefix(s3_server: Any) -> str:
    """A fresh key prefix in the test bucket (no scheme, no bucket)."""
    return f"adv-i21b/{uuid.uuid4().hex}"


def _source(s3_server: Any, rel: str, **kw: Any) -> LandingFilesSource:
    kw.setdefault("schema", ORDERS_DDL)
    return LandingFilesSource(
        path=f"s3://{s3_server.bucket}/{rel}", file_format="csv", storage_options=s3_server.options(), **kw
    )


def _rel_paths(source: LandingFilesSource, entries: list[dict[str, Any]]) -> list[str]:
    return sorted(e["path"][len(source.root) + 1 :] for e in entries)


ORDER = b"order_id,customer,amount,order_ts\n1,c-1,1.00,2026-11-01T00:00:00\n"


# -- I7: one odd key must not stop the pipeline ------------------------------------------------
def test_a_key_with_a_control_character_is_refused_clearly_not_a_wedge(
    s3_server: Any, prefix: str, tmp_path: Any
) -> None:
    """Finding: S3 allows any UTF-8 in a key, a tab or a newline included. obstore's listing
    refuses to parse such a key and raises ``InvalidPathError`` for the whole listing, so
    ``ObjectStorage.walk`` (and with it every planning of the pipeline) fails for as long as
    the key is there: whoever can drop one object into the landing prefix stops the pipeline
    (I7), with an error that is not the product's (I6). The same path would catch a key with
    an empty segment (``a//b.csv``) on AWS, which SeaweedFS normalises away.

    Changed from the adversary's "skipped with a warning" (which this test first asserted):
    obstore fails the whole listing page that holds such a key (obstore issue 429; its
    maintainer: no way to recover in obstore), and a listing restarted past the key (its
    ``offset``) never lists the keys that page held before it, so skipping the key would
    silently drop other files from the batch (I3), for ever in an interval batch. What is
    asserted instead is the brief's other answer: a refusal of the product (not retried: a
    person must act) that names the pipeline and the key and says how to get out, and
    planning that goes on once the key is gone."""
    rel = f"{prefix}/land"
    store = storage_at(f"s3://{s3_server.bucket}/{rel}", s3_server.options())
    store.put("good.csv", ORDER)
    _raw_put(s3_server.options(), s3_server.bucket, f"{rel}/bad\tname.csv", ORDER)
    source = _source(s3_server, rel)
    named = r"tests\.orders.*bad\\tname\.csv.*Rename or remove"  # the pipeline, the key, the way out
    with pytest.raises(BatchRefusedError, match=named) as caught:
        plan_for(source, str(tmp_path / "table"))
    assert not caught.value.retryable
    # Not a wedge for ever: once the key is gone (removed with another client), planning goes on.
    _raw_put(s3_server.options(), s3_server.bucket, f"{rel}/bad\tname.csv", b"", method="DELETE")
    plan = plan_for(source, str(tmp_path / "table"))
    assert _rel_paths(source, plan.inputs) == ["good.csv"]


def test_an_empty_folder_marker_is_not_planned_as_a_file(s3_server: Any, prefix: str, tmp_path: Any) -> None:
    """Finding: a folder marker (an empty object whose key ends in ``/``, what the S3 console's
    "Create folder" writes) with nothing under it is planned as a file: obstore drops the
    trailing ``/``, so ``s3://b/land/incoming/`` is listed as the key ``incoming``, size 0,
    and only markers with a key below them are recognised. Its HEAD (``land/incoming``, no
    ``/``) finds nothing, so verify fails the batch with "planned but is gone"; re-frozen
    without it, the next batch lists and plans it again: the pipeline is wedged (I7) by an
    empty folder. The docs say a folder marker is skipped."""
    rel = f"{prefix}/land"
    store = storage_at(f"s3://{s3_server.bucket}/{rel}", s3_server.options())
    store.put("good.csv", ORDER)
    _raw_put(s3_server.options(), s3_server.bucket, f"{rel}/incoming/", b"")
    source = _source(s3_server, rel)
    plan = plan_for(source, str(tmp_path / "table"))
    assert _rel_paths(source, plan.inputs) == ["good.csv"]
    source.verify(plan)  # nothing changed since planning


# -- I3: every planned file, and only those, is the input ---------------------------------------
def test_a_file_whose_name_is_also_a_folder_is_still_planned(
    s3_server: Any, prefix: str, tmp_path: Any
) -> None:
    """Finding: on a store ``land/2026-11-01.csv`` (an object with rows) and
    ``land/2026-11-01.csv/part.csv`` may both exist. The folder-marker filter drops every
    listed key that is also a folder of another key, whatever its size, so the first file's
    rows are never planned, never loaded, and nothing says so: silent loss of input. A
    marker is an empty object named like a folder; a file with bytes is input."""
    rel = f"{prefix}/land"
    store = storage_at(f"s3://{s3_server.bucket}/{rel}", s3_server.options())
    store.put("2026-11-01.csv", ORDER)
    store.put("2026-11-01.csv/part.csv", ORDER.replace(b"\n1,", b"\n2,"))
    assert store.head("2026-11-01.csv") is not None  # a file of 66 bytes, readable by its key
    source = _source(s3_server, rel)
    plan = plan_for(source, str(tmp_path / "table"))
    assert _rel_paths(source, plan.inputs) == ["2026-11-01.csv", "2026-11-01.csv/part.csv"]


def test_the_tables_own_objects_below_the_landing_prefix_are_never_input(s3_server: Any, prefix: str) -> None:
    """Finding: a table whose URI lies below the landing prefix (``s3://b/raw`` landing,
    ``s3://b/raw/orders`` table) has its own data objects planned as input: only ``_`` and
    ``.`` segments are skipped, and a part file is neither. Each load then writes new part
    files that the next batch plans and loads again (every row once more per run), or, with
    CSV, a batch of Parquet bytes that fails to parse for ever. The local landing directory
    does the same (checked by hand: pre-existing), but a store's prefixes nest by name alone,
    which makes it an easy mistake there. Expected: the table's objects are never planned
    (or the overlap is refused up front with a ConfigurationError)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from airflow_eod.core.ask import ask
    from airflow_eod.core.planlog.store import PlanLog

    land = f"s3://{s3_server.bucket}/{prefix}/raw"
    table = TableRef.parse(f"{land}/orders", s3_server.options())
    write_deltalake(table.location, pa.table({"order_id": [1, 2]}), storage_options=s3_server.options())
    storage_at(land, s3_server.options()).put("incoming.parquet", b"PAR1")
    source = LandingFilesSource(
        path=land, file_format="parquet", pattern="*.parquet", storage_options=s3_server.options()
    )
    try:
        plan = source.plan(
            PlanLog(table, "orders"), run_token="run-1", is_committed=lambda k: ask(table, k).committed
        )
    except ConfigurationError:
        return  # refusing the overlap up front is a right answer too
    assert plan is not None
    assert _rel_paths(source, plan.inputs) == ["incoming.parquet"]


# -- I6: a clear error, and the right kind ----------------------------------------------------
def test_a_landing_bucket_that_does_not_exist_is_a_clear_error(s3_server: Any, tmp_path: Any) -> None:
    """Finding: a landing prefix in a bucket that does not exist fails planning with obstore's
    ``GenericError`` (``NoSuchBucket``), not an error of the product: a local landing
    directory that does not exist is a :class:`BatchError` naming it ("a missing source"),
    and the task's error class is what says whether a retry can help (I6)."""
    source = LandingFilesSource(
        path=f"s3://no-such-bucket-{uuid.uuid4().hex[:12]}/land",
        file_format="csv",
        schema=ORDERS_DDL,
        storage_options=s3_server.options(),
    )
    with pytest.raises(EodError, match="no-such-bucket"):
        plan_for(source, str(tmp_path / "table"))


def test_a_malformed_endpoint_in_the_landing_options_is_a_configuration_error(
    s3_server: Any, tmp_path: Any
) -> None:
    """Finding: an endpoint that is no URL (a typo in the landing connection's host, say
    ``"s3 gateway"``) makes obstore panic in the first request: a ``PanicException``, which
    derives from ``BaseException``, escapes planning, past every ``except Exception`` (I6).
    Expected: a ConfigurationError naming the option, before any request."""
    options = dict(s3_server.options(), AWS_ENDPOINT_URL="not a url")
    source = LandingFilesSource(
        path=f"s3://{s3_server.bucket}/land", file_format="csv", storage_options=options
    )
    try:
        source.list_files()
    except ConfigurationError:
        return
    except BaseException as exc:
        pytest.fail(f"a malformed endpoint escaped as {type(exc).__module__}.{type(exc).__name__}: {exc}")
    pytest.fail("a malformed endpoint was accepted")


def test_an_interval_whose_prefix_holds_nothing_is_a_missing_source(
    s3_server: Any, prefix: str, tmp_path: Any
) -> None:
    """Finding: an interval pipeline whose templated landing prefix has no object yet (the day's
    export has not arrived) freezes an empty batch, which commits an empty marker: the interval
    counts as loaded, and the files that arrive later are never loaded (unless someone
    restates it by hand). A local interval directory that does not exist is a BatchError
    ("a missing source") and the task retries until it arrives. On a store a prefix with no
    object is the missing directory (an empty folder that exists is a folder marker)."""
    source = _source(s3_server, f"{prefix}/exports/dt=2026-11-01", boundary="interval")
    start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    with pytest.raises(BatchError, match=r"missing source|does not exist|no object"):
        interval_plan(source, str(tmp_path / "table"), start, start + dt.timedelta(days=1))


# -- Spark: what it is handed must name exactly the planned objects ---------------------------
@pytest.mark.spark
@pytest.mark.parametrize("folder", ["land zone", "land[1]"])
def test_a_landing_prefix_with_a_space_or_glob_characters_loads(
    spark: Any, s3_server: Any, prefix: str, tmp_path: Any, folder: str
) -> None:
    """Finding: ``StoreFiles.spark_path`` escapes glob characters in the key only, not in the
    landing prefix, and ``path_of_uri`` compares Spark's percent-encoded URI with the prefix
    as written. A prefix with a space (reported as ``%20``) never matches, so the files Spark
    read are "read but not planned"; a prefix with ``[1]`` is a glob that Spark expands to
    ``land1/`` (a decoy there shows it reaching into another prefix; check_resolved catches
    it). Either way no batch of such a prefix can ever load, though the same directory name
    loads locally (spark_path escapes the whole local path)."""
    from tests.support.helpers import check, spec_for
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    from airflow_eod.examples.sample_data import write_order_files
    from airflow_eod.spark.load_job import run_load

    landing = TableRef.parse(f"s3://{s3_server.bucket}/{prefix}/{folder}", s3_server.options())
    local = tmp_path / "gen"
    write_order_files(str(local), 1, 10, first_id=1)
    name = os.listdir(local)[0]
    data = (local / name).read_bytes()
    landing.storage().put(name, data)
    # What "land[1]" would glob to, had it been a pattern: never input.
    storage_at(f"s3://{s3_server.bucket}/{prefix}/land1", s3_server.options()).put(
        name, data.replace(b"\n1,", b"\n999999,", 1)
    )
    source = LandingFilesSource(
        path=landing.location, file_format="csv", schema=ORDERS_DDL, storage_options=landing.storage_options
    )
    table = str(tmp_path / "table")
    plan = plan_for(source, table)
    assert [e["path"] for e in plan.inputs] == [f"{landing.location}/{name}"]
    result = run_load(spark, spec_for(source, table, plan))
    assert result.outcome == "committed" and result.rows == 10
    cmp = check(table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 10, cmp.describe()
