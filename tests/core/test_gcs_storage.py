"""The GCS backend of the storage seam on fake-gcs-server (issue 21): racers on one key,
unknown outcomes settled by reading back, throttling retried, and why the emulator needs
its XML upload front."""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from airflow_eod.core.storage import UnknownOutcome, put_settled
from tests.support.put_race import race_one_key

pytestmark = pytest.mark.objectstore

if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):  # CI: obstore missing fails instead of skipping
    import obstore

    from airflow_eod.core.storage import gcs_store, object_store
else:
    obstore = pytest.importorskip("obstore")
    object_store = pytest.importorskip("airflow_eod.core.storage.object_store")
    gcs_store = pytest.importorskip("airflow_eod.core.storage.gcs_store")
GCSStorage = gcs_store.GCSStorage

RACERS = 16
# CI-sized by default; `make test-gcs-race` runs 200 rounds.
ROUNDS = int(os.environ.get("EOD_GCS_RACE_ROUNDS", "20"))


@pytest.fixture
def root(gcs_server: Any) -> str:
    return f"gs://{gcs_server.bucket}/gcs-tests/{uuid.uuid4().hex}"


@pytest.fixture
def store(gcs_server: Any, root: str) -> Iterator[Any]:
    yield GCSStorage.from_url(root, gcs_server.options())


def test_sixteen_racers_on_one_key_exactly_one_wins_every_round(gcs_server: Any, root: str) -> None:
    """16 threads, each with a client of its own, put-if-absent one key at one moment, round
    after round: exactly one wins each round, and the object is the winner's bytes.

    ``EOD_GCS_RACE_ROUNDS`` rounds (default 20); ``make test-gcs-race`` runs 200."""
    clients = [GCSStorage.from_url(root, gcs_server.options()) for _ in range(RACERS)]
    result = race_one_key(clients, rounds=ROUNDS, put_request="PutObject(If-None-Match)")
    print("\n" + result.summary(RACERS, "GCS"))
    assert not result.errors, result.errors[:3]
    assert result.bad == []


def test_the_racers_overlap_so_a_check_then_put_lets_several_win(gcs_server: Any, root: str) -> None:
    """The control of the race above: the same 16 racers with a head-then-put (no
    precondition) do overlap at the emulator, and several "win" a key. Without this, one
    winner a round could mean only that the racers came one after another."""
    clients = [GCSStorage.from_url(root, gcs_server.options()) for _ in range(RACERS)]

    def race(n: int, key: str, barrier: threading.Barrier, won: list[int]) -> None:
        barrier.wait()
        if clients[n].head(key) is None:
            clients[n].put(key, f"racer {n}".encode())
            won.append(n)

    most = 0
    for r in range(5):
        barrier = threading.Barrier(RACERS)
        won: list[int] = []
        args = [(n, f"control/{r}.json", barrier, won) for n in range(RACERS)]
        threads = [threading.Thread(target=race, args=a) for a in args]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        most = max(most, len(won))
    assert most > 1


def test_the_emulator_alone_has_no_xml_upload_which_is_why_the_front_exists(gcs_server: Any) -> None:
    """obstore uploads with the XML API; fake-gcs-server answers such a PUT 400 ("invalid
    uploadType"), so the tests reach it through tests/support/gcs_xml_front.py. The day a
    release serves it, this fails and the front can go."""
    url = f"http://127.0.0.1:{gcs_server.emulator_port}/{gcs_server.bucket}/direct%2Fk.json"
    # The Host the front forwards (the emulator's public host), so that the same route answers.
    headers = {"x-goog-if-generation-match": "0", "Host": f"127.0.0.1:{gcs_server.port}"}
    request = urllib.request.Request(url, data=b"x", method="PUT", headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 400
    assert b"invalid uploadType" in refused.value.read()


def test_the_front_passes_the_precondition_on_and_the_emulators_412_back(store: Any, gcs_server: Any) -> None:
    """Through the front the XML create is the emulator's conditional upload: once 200, then
    412 (obstore's AlreadyExistsError) whatever the body; a plain PUT still overwrites."""
    raw = obstore.store.GCSStore(
        gcs_server.bucket,
        prefix="front-tests",
        config={"service_account": gcs_server.service_account_path},
        client_options={"allow_http": True},
    )
    key = f"{uuid.uuid4().hex}.json"
    made = obstore.put(raw, key, b"one", mode="create", use_multipart=False)
    assert made["version"]  # the generation, moved by the front into x-goog-generation
    with pytest.raises(obstore.exceptions.AlreadyExistsError):
        obstore.put(raw, key, b"two", mode="create", use_multipart=False)
    assert bytes(obstore.get(raw, key).bytes()) == b"one"
    obstore.put(raw, key, b"three", use_multipart=False)
    assert bytes(obstore.get(raw, key).bytes()) == b"three"


def _patch_put(
    monkeypatch: pytest.MonkeyPatch,
    fake: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any],
) -> list[int]:
    """Route obstore.put through ``fake(real, args, kwargs)``; returns the call counter."""
    real = obstore.put
    calls = [0]

    def put(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return fake(real, args, kwargs)

    monkeypatch.setattr(object_store.obstore, "put", put)
    return calls


def test_a_put_that_lands_and_loses_its_reply_is_settled_as_mine(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conditional put lands, then the connection resets (a fault injected in the client:
    the emulator cannot drop a reply on cue): UnknownOutcome, then put_settled reads back."""
    body = b'{"attempt": "a-1", "rows": 3}'

    def lands_then_resets(real: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        real(*args, **kwargs)
        if calls[0] == 1:
            raise obstore.exceptions.GenericError(
                "Generic GCS error: error sending request: connection reset by peer"
            )
        return None

    calls = _patch_put(monkeypatch, lands_then_resets)
    with pytest.raises(UnknownOutcome):
        store.put_if_absent("u/1.json", body, attempt="a-1")
    assert put_settled(store, "u/1.json", body, attempt="a-1") is True
    assert put_settled(store, "u/1.json", b'{"attempt": "a-2", "rows": 3}', attempt="a-2") is False
    assert store.get("u/1.json") == body


@pytest.mark.parametrize(
    "answer",
    [
        "Server returned non-2xx status code: 429 Too Many Requests: rateLimitExceeded",
        "Server returned non-2xx status code: 503 Service Unavailable",
    ],
)
def test_rate_limits_and_unavailability_are_retried_with_backoff(
    store: Any, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    def refuses_twice(real: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if calls[0] <= 2:
            raise obstore.exceptions.GenericError(f"Generic GCS error: {answer}")
        return real(*args, **kwargs)

    monkeypatch.setattr(object_store, "BACKOFF_FIRST", 0.001)
    calls = _patch_put(monkeypatch, refuses_twice)
    assert store.put_if_absent("t/1.json", b"x") is True
    assert calls[0] == 3
    assert store.requests["PutObject(If-None-Match)"] == 3
    assert store.get("t/1.json") == b"x"
