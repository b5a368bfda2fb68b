"""Start and stop a throwaway Apache Kafka broker on 127.0.0.1 for the `kafka` tests.

One JVM in KRaft mode, broker and controller in one process (``process.roles=broker,
controller``), started from Kafka's own jars: ``org.apache.kafka:kafka_2.13`` and its
dependencies, fetched once with Maven (``mvn dependency:copy-dependencies`` over a small pom)
into ``~/.cache/airflow-eod/kafka-broker-<version>``; a second run fetches nothing.

Two client listeners: ``PLAINTEXT`` (what most tests use) and ``SASL_PLAINTEXT`` with the
PLAIN mechanism and one user (:data:`SASL_USER`), for the tests of connections with
credentials. Every port is a free one on 127.0.0.1. The log cleaner runs every second and
retention checks every second, so the tests of compaction and retention do not wait long.
The process runs in a session of its own; the reaper (tests/support/reaper.py) kills it and
removes its directory if this process dies without :meth:`KafkaBroker.stop`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NoReturn

import pytest

from tests.support.loopback import free_ports, log_tail, stop_processes
from tests.support.maven_fetch import maven_jars
from tests.support.reaper import Reaper, watch

KAFKA_VERSION = "4.1.1"
SASL_USER = "eod-kafka-loader"
SASL_PASSWORD = "k4fka-S3cret-for-eod-tests"
READY_SECONDS = 90.0
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-eod.tests</groupId><artifactId>kafka-broker</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version></dependency>
    <!-- Kafka logs through SLF4J 1.7; this binds it to the Log4j 2 the broker carries. -->
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>2.24.3</version></dependency>
  </dependencies>
</project>
"""


def _skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get("EOD_REQUIRE_KAFKA"):
        pytest.fail(reason)
    pytest.skip(reason)


def broker_jars(version: str = KAFKA_VERSION) -> str:
    """The folder of the broker's jars, fetched with Maven the first time.

    :param version: the Kafka release.
    :raises RuntimeError: when Maven fails (its output's tail in the message).
    """
    return maven_jars(
        f"kafka-broker-{version}",
        _POM.format(version=version),
        "log4j-slf4j-impl-2.24.3.jar",
        what=f"the Kafka {version} broker's jars",
        missing=_skip_or_fail,
    )


@dataclass
class KafkaBroker:
    """One KRaft broker (and controller) on 127.0.0.1."""

    root: str
    port: int
    sasl_port: int
    proc: subprocess.Popen[bytes]
    reaper: Reaper | None = None
    _admin: Any = None

    host = "127.0.0.1"
    sasl_user = SASL_USER
    sasl_password = SASL_PASSWORD

    @property
    def bootstrap(self) -> str:
        """The PLAINTEXT listener, ``127.0.0.1:<port>``."""
        return f"{self.host}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT (PLAIN) listener."""
        return f"{self.host}:{self.sasl_port}"

    @classmethod
    def start(cls) -> KafkaBroker:
        java = shutil.which("java")
        if java is None:
            _skip_or_fail(
                "no java on PATH: the Kafka broker is a JVM (apt-get install openjdk-17-jdk-headless)"
            )
        try:
            import confluent_kafka  # noqa: F401  (the tests' producer and admin client)
        except ImportError:
            _skip_or_fail("confluent-kafka is not installed (pip install -e '.[dev]')")
        lib = broker_jars()
        root = tempfile.mkdtemp(prefix="eod-kafka-", dir=os.environ.get("EOD_KAFKA_ROOT", "/tmp"))
        port, sasl_port, controller = free_ports(3)
        props = os.path.join(root, "server.properties")
        jaas = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{SASL_USER}="{SASL_PASSWORD}";'
        )
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                f"CONTROLLER://127.0.0.1:{controller}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
            ),
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "log.dirs": os.path.join(root, "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            # Retention and compaction act within seconds (their tests wait for them).
            "log.retention.check.interval.ms": "1000",
            "log.cleaner.backoff.ms": "500",
            "log.segment.delete.delay.ms": "0",
            "file.delete.delay.ms": "0",
            # A small JVM on a 2-core machine: no more threads than it needs.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
        }
        with open(props, "w") as fh:
            fh.writelines(f"{k}={v}\n" for k, v in settings.items())
        with open(os.path.join(root, "log4j2.yaml"), "w") as fh:
            fh.write(_LOG4J2.format(log=os.path.join(root, "server.log")))
        cp = os.path.join(lib, "*")
        env = {**os.environ, "KAFKA_HEAP_OPTS": ""}
        jvm = [
            java,
            "-Xmx512m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={root}/log4j2.yaml",
            "-cp",
            cp,
        ]
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", props],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
        if fmt.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(f"kafka-storage format failed: {(fmt.stdout + fmt.stderr)[-2000:]}")
        log = open(os.path.join(root, "stdout"), "wb")
        try:
            proc = subprocess.Popen(
                [*jvm, "kafka.Kafka", props],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
            )
        finally:
            log.close()
        reaper = watch([{"kill_tree": proc.pid}, {"rmtree": root}])
        broker = cls(root, port, sasl_port, proc, reaper)
        try:
            broker._wait_ready()
        except BaseException:
            broker.stop()
            raise
        return broker

    def _wait_ready(self) -> None:
        """Until the broker answers a metadata request."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({self.proc.returncode}): {self.log_tail()}")
            try:
                AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=3)
                return
            except Exception:  # not up yet
                time.sleep(0.5)
        raise RuntimeError(
            f"the Kafka broker on {self.bootstrap} was not ready in {READY_SECONDS}s: {self.log_tail()}"
        )

    def log_tail(self) -> str:
        return log_tail(os.path.join(self.root, "stdout")) + log_tail(os.path.join(self.root, "server.log"))

    def stop(self) -> None:
        stop_processes([self.proc], self.root, self.reaper)
        self.reaper = None

    # -- what the tests do to the broker ------------------------------------------------
    def config(self, **extra: Any) -> dict[str, Any]:
        """A librdkafka client configuration for the PLAINTEXT listener. The tests' own clients
        log only critical errors: a producer a test keeps reconnects noisily to the stopped
        broker at the session's end, and those lines would bury the test report."""
        return {"bootstrap.servers": self.bootstrap, "log_level": 2, **extra}

    def admin(self) -> Any:
        """The broker's admin client (one, kept: a collected client cancels its futures)."""
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.config())
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, **config: str) -> None:
        """Create ``name`` and wait until its leaders are known."""
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)]
        )
        futures[name].result(timeout=30)
        self._wait_leaders(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        self.admin().create_partitions([NewPartitions(name, total)])[name].result(timeout=30)
        self._wait_leaders(name, total)

    def delete_topic(self, name: str) -> None:
        self.admin().delete_topics([name])[name].result(timeout=30)
        deadline = time.monotonic() + 30
        while name in self.admin().list_topics(timeout=5).topics and time.monotonic() < deadline:
            time.sleep(0.2)

    def delete_records(self, name: str, before: dict[int, int]) -> None:
        """``DeleteRecords``: move each partition's log start offset to ``before[partition]``."""
        from confluent_kafka import TopicPartition

        parts = [TopicPartition(name, p, o) for p, o in before.items()]
        for future in self.admin().delete_records(parts).values():
            future.result(timeout=30)

    def _wait_leaders(self, name: str, partitions: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            meta = self.admin().list_topics(name, timeout=5).topics.get(name)
            if meta is not None and meta.error is None and len(meta.partitions) == partitions:
                if all(p.leader >= 0 for p in meta.partitions.values()):
                    return
            time.sleep(0.2)
        raise RuntimeError(f"topic {name} has no leader for all {partitions} partitions after 30 s")

    def produce(
        self, topic: str, records: Iterable[tuple[int, str | None, str | None]], **config: Any
    ) -> list[tuple[int, int]]:
        """Produce ``(partition, key, value)`` records, idempotently, and wait for each ack.

        :returns: the ``(partition, offset)`` each record got, in order.
        """
        from confluent_kafka import Producer

        producer = Producer(self.config(**{"enable.idempotence": True, "linger.ms": 5, **config}))
        acks: list[tuple[int, int]] = []
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acks.append((msg.partition(), msg.offset()))

        for partition, key, value in records:
            producer.produce(topic, key=key, value=value, partition=partition, on_delivery=delivered)
            producer.poll(0)
        left = producer.flush(60)
        if errors or left:
            raise RuntimeError(f"produce to {topic}: {len(errors)} errors ({errors[:3]}), {left} unacked")
        return acks

    def set_consumer_quota(self, client_id: str, bytes_per_second: int | None) -> None:
        """Throttle the fetches of consumers whose ``client.id`` is ``client_id`` to
        ``bytes_per_second`` (``None``: lift it), with Kafka's own ``kafka-configs`` tool: the
        tests' way to keep a Spark read in flight for seconds (librdkafka's admin client has
        no client-quota call)."""
        change = (
            ["--delete-config", "consumer_byte_rate"]
            if bytes_per_second is None
            else ["--add-config", f"consumer_byte_rate={bytes_per_second}"]
        )
        out = subprocess.run(
            [
                str(shutil.which("java")),
                "-Xmx128m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-cp",
                os.path.join(broker_jars(), "*"),
                "kafka.admin.ConfigCommand",
                "--bootstrap-server",
                self.bootstrap,
                "--alter",
                *change,
                "--entity-type",
                "clients",
                "--entity-name",
                client_id,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"kafka-configs could not set the quota of {client_id}: {out.stderr[-2000:]}")

    def transactional_producer(self, transactional_id: str) -> Any:
        """A transactional producer, its transactions initialised."""
        from confluent_kafka import Producer

        producer = Producer(self.config(**{"transactional.id": transactional_id, "linger.ms": 5}))
        producer.init_transactions(30)
        return producer


def _cluster_id() -> str:
    """A cluster id as ``kafka-storage random-uuid`` prints it: 16 random bytes, base64url,
    never starting with ``-`` (Kafka's ``Uuid.randomUuid`` draws again then too: the storage
    tool's argument parser takes ``-t -abc...`` for an option, and the broker never starts)."""
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


_LOG4J2 = """Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka.log.LogCleaner
        level: INFO
      - name: org.apache.kafka.raft
        level: WARN
"""
