"""Start and stop a throwaway Hadoop cluster on 127.0.0.1 for the `yarn` tests: HDFS (one
NameNode, one DataNode) and YARN (a ResourceManager and one NodeManager) in one JVM.

The cluster is Hadoop's own test cluster (``MiniDFSCluster`` and ``MiniYARNCluster`` from
``org.apache.hadoop:hadoop-client-minicluster``), at the Hadoop version the pyspark wheel
carries, so Spark's YARN client speaks to it as to a production ResourceManager. Its jars are
fetched once with Maven (``mvn dependency:copy-dependencies`` over a small pom) into
``~/.cache/airflow-eod/mini-yarn-<version>``; the launcher (:data:`_LAUNCHER`, a few lines of
Java that start both clusters and write the client configuration) is compiled there once with
``javac``. A second run fetches and compiles nothing.

What a client needs is written to :attr:`MiniYarn.conf_dir` (``core-site.xml`` and
``yarn-site.xml``: ``fs.defaultFS`` and the ResourceManager's addresses only, not the test
settings of the mini clusters): ``HADOOP_CONF_DIR`` for spark-submit, as on an edge node. Spark
stages its files on the mini HDFS (``/user/<user>/.sparkStaging``), as on a real cluster. The
NodeManager runs containers as this user on this machine, so a local table path is the same
path for the driver on the cluster; and Spark's jars are "already on the node"
(``spark.yarn.jars=local:...``), so nothing uploads the 300 MB of them per application.

The JVM runs in a session of its own; every container is a process below it. The reaper
(tests/support/reaper.py) kills the whole tree and removes the directory if this process dies
without :meth:`MiniYarn.stop`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, NoReturn
from xml.sax.saxutils import escape

import pytest

from tests.support.loopback import log_tail, stop_processes
from tests.support.maven_fetch import maven_jars
from tests.support.reaper import Reaper, watch
from tests.support.spark_cluster import pyspark_home

HADOOP_VERSION = "3.5.0"
READY_SECONDS = 120.0
# What the shaded minicluster jar leaves out and its test classes still load: JUnit's
# assertions (MiniDFSCluster's), log4j 1 (reload4j) and Bouncy Castle (the DataNode's TLS).
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>airflow-eod.tests</groupId><artifactId>mini-yarn</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-client-minicluster</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-client-runtime</artifactId><version>{version}</version></dependency>
    <dependency><groupId>org.junit.jupiter</groupId><artifactId>junit-jupiter-api</artifactId><version>5.11.4</version></dependency>
    <dependency><groupId>ch.qos.reload4j</groupId><artifactId>reload4j</artifactId><version>1.2.26</version></dependency>
    <dependency><groupId>org.bouncycastle</groupId><artifactId>bcprov-jdk18on</artifactId><version>1.78.1</version></dependency>
    <dependency><groupId>org.bouncycastle</groupId><artifactId>bcpkix-jdk18on</artifactId><version>1.78.1</version></dependency>
  </dependencies>
</project>
"""
_LAST_JAR = "bcpkix-jdk18on-1.78.1.jar"
_LAUNCHER = """
import java.io.File;
import java.io.FileOutputStream;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

/** HDFS and YARN on 127.0.0.1; writes the clusters' configuration to args[1], then waits. */
public final class EodMiniCluster {
  public static void main(String[] args) throws Exception {
    File root = new File(args[0]);
    File confOut = new File(args[1]);
    YarnConfiguration conf = new YarnConfiguration();
    conf.set("hadoop.tmp.dir", new File(root, "tmp").getAbsolutePath());
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(root, "dfs").getAbsolutePath());
    MiniDFSCluster dfs = new MiniDFSCluster.Builder(conf).numDataNodes(1).build();
    dfs.waitActive();
    conf.set("fs.defaultFS", dfs.getURI().toString());
    conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
    conf.set("yarn.nodemanager.hostname", "127.0.0.1");
    // The NodeManager's allowance: what it hands out, not what it reserves.
    conf.setInt("yarn.nodemanager.resource.memory-mb", 8192);
    conf.setInt("yarn.nodemanager.resource.cpu-vcores", 8);
    conf.setInt("yarn.scheduler.minimum-allocation-mb", 256);
    conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
    conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
    conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "99.9");
    conf.set("yarn.scheduler.capacity.root.queues", "default");
    conf.set("yarn.scheduler.capacity.root.default.capacity", "100");
    conf.set("yarn.scheduler.capacity.maximum-am-resource-percent", "0.8");
    conf.setInt("yarn.resourcemanager.am.max-attempts", 4);
    // Containers are handed out on NodeManager heartbeats: a short interval starts each
    // application's driver and executor sooner (the tests run many small applications).
    conf.setInt("yarn.resourcemanager.nodemanagers.heartbeat-interval-ms", 250);
    MiniYARNCluster yarn = new MiniYARNCluster("eod", 1, 1, 1);
    yarn.init(conf);
    yarn.start();
    Configuration out = yarn.getConfig();
    out.set("fs.defaultFS", dfs.getURI().toString());
    File tmp = new File(confOut.getPath() + ".tmp");
    try (OutputStream os = new FileOutputStream(tmp)) { out.writeXml(os); }
    Files.move(tmp.toPath(), confOut.toPath(), StandardCopyOption.ATOMIC_MOVE);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try { yarn.stop(); } finally { dfs.shutdown(); }
    }));
    Thread.currentThread().join();
  }
}
"""
_LOG4J = """log4j.rootLogger=WARN, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=%d{ISO8601} %-5p %c{2} - %m%n
"""
# The client's view of the clusters: what an edge node's HADOOP_CONF_DIR would hold.
CLIENT_KEYS = (
    "fs.defaultFS",
    "yarn.resourcemanager.address",
    "yarn.resourcemanager.scheduler.address",
    "yarn.resourcemanager.webapp.address",
    "yarn.resourcemanager.admin.address",
    "yarn.resourcemanager.hostname",
)


def _skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get("EOD_REQUIRE_YARN"):
        pytest.fail(reason)
    pytest.skip(reason)


def cluster_jars(version: str = HADOOP_VERSION) -> str:
    """The folder of the mini cluster's jars, fetched with Maven the first time.

    :param version: the Hadoop release.
    :raises RuntimeError: when Maven fails (its output's tail in the message).
    """
    return maven_jars(
        f"mini-yarn-{version}",
        _POM.format(version=version),
        _LAST_JAR,
        what=f"Hadoop {version}'s mini cluster",
        missing=_skip_or_fail,
    )


def launcher_classes(lib: str) -> str:
    """The launcher compiled against ``lib`` (once per launcher text)."""
    digest = hashlib.sha256(_LAUNCHER.encode()).hexdigest()[:12]
    classes = os.path.join(os.path.dirname(lib), f"launcher-{digest}")
    if os.path.exists(os.path.join(classes, "EodMiniCluster.class")):
        return classes
    javac = shutil.which("javac")
    if javac is None:
        _skip_or_fail(
            "javac is missing: it compiles the mini cluster's launcher (apt-get install openjdk-17-jdk)"
        )
    work = tempfile.mkdtemp(prefix="javac-", dir=os.path.dirname(lib))
    try:
        with open(os.path.join(work, "EodMiniCluster.java"), "w") as fh:
            fh.write(_LAUNCHER)
        out = subprocess.run(
            [
                str(javac),
                "-d",
                os.path.join(work, "classes"),
                "-cp",
                os.path.join(lib, "*"),
                "EodMiniCluster.java",
            ],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"javac could not compile the mini cluster's launcher: {out.stderr[-2000:]}")
        if not os.path.exists(classes):
            os.rename(os.path.join(work, "classes"), classes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return classes


def _properties(path: str) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    found: dict[str, str] = {}
    for prop in ET.parse(path).getroot().iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None and value is not None:
            found[name] = value
    return found


def _write_site(path: str, props: dict[str, str]) -> None:
    lines = [
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
        for k, v in props.items()
    ]
    with open(path, "w") as fh:
        fh.write('<?xml version="1.0"?>\n<configuration>\n' + "".join(lines) + "</configuration>\n")


@dataclass
class MiniYarn:
    """HDFS and YARN on 127.0.0.1, and the client configuration that reaches them."""

    root: str
    proc: subprocess.Popen[bytes]
    conf_dir: str
    props: dict[str, str]
    reaper: Reaper | None = None
    _apps_seen: set[str] = field(default_factory=set)

    @property
    def namenode(self) -> str:
        """``hdfs://localhost:<port>``: the file system's URI."""
        return self.props["fs.defaultFS"]

    @property
    def webapp(self) -> str:
        """The ResourceManager's web address (its REST API)."""
        return "http://" + self.props["yarn.resourcemanager.webapp.address"]

    @classmethod
    def start(cls) -> MiniYarn:
        java = shutil.which("java")
        if java is None:
            _skip_or_fail("no java on PATH: Hadoop's mini cluster is a JVM (apt-get install openjdk-17-jdk)")
        lib = cluster_jars()
        classes = launcher_classes(lib)
        root = tempfile.mkdtemp(prefix="eod-yarn-", dir=os.environ.get("EOD_YARN_ROOT", "/tmp"))
        with open(os.path.join(root, "log4j.properties"), "w") as fh:
            fh.write(_LOG4J)
        written = os.path.join(root, "cluster.xml")
        log = open(os.path.join(root, "stdout"), "wb")
        try:
            proc = subprocess.Popen(
                [
                    str(java),
                    "-Xmx768m",
                    "-XX:+UseSerialGC",
                    f"-Dlog4j.configuration=file:{root}/log4j.properties",
                    "-cp",
                    f"{classes}:{os.path.join(lib, '*')}",
                    "EodMiniCluster",
                    root,
                    written,
                ],
                cwd=root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Containers run `$JAVA_HOME/bin/java`.
                env={**os.environ, "JAVA_HOME": os.environ.get("JAVA_HOME") or _java_home(str(java))},
            )
        finally:
            log.close()
        reaper = watch([{"kill_tree": proc.pid}, {"rmtree": root}])
        deadline = time.monotonic() + READY_SECONDS
        while not os.path.exists(written):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log_tail(os.path.join(root, "stdout"))
                stop_processes([proc], root, reaper)
                raise RuntimeError(f"the mini Hadoop cluster did not start in {READY_SECONDS:.0f}s: {tail}")
            time.sleep(0.3)
        every = _properties(written)
        props = {k: every[k] for k in (*CLIENT_KEYS, "dfs.namenode.http-address") if k in every}
        conf_dir = os.path.join(root, "conf")
        os.makedirs(conf_dir)
        _write_site(os.path.join(conf_dir, "core-site.xml"), {"fs.defaultFS": props["fs.defaultFS"]})
        _write_site(
            os.path.join(conf_dir, "hdfs-site.xml"),
            {"dfs.namenode.http-address": props["dfs.namenode.http-address"]},
        )
        _write_site(
            os.path.join(conf_dir, "yarn-site.xml"), {k: v for k, v in props.items() if k.startswith("yarn.")}
        )
        return cls(root, proc, conf_dir, props, reaper)

    def log_tail(self) -> str:
        return log_tail(os.path.join(self.root, "stdout"))

    def stop(self) -> None:
        stop_processes([self.proc], self.root, self.reaper)
        self.reaper = None

    # -- what a client sees -------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """The environment spark-submit needs to find the clusters (an edge node's)."""
        return {
            "HADOOP_CONF_DIR": self.conf_dir,
            "YARN_CONF_DIR": self.conf_dir,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }

    def spark_conf(self, python: str | None = None) -> dict[str, str]:
        """``--conf`` settings for a small application on this cluster: Spark's jars already on
        the node, one small executor, and the Python (with airflow-eod) on the node."""
        import sys

        python = python or sys.executable
        return {
            "spark.yarn.jars": f"local:{pyspark_home()}/jars/*",
            "spark.executor.instances": "1",
            "spark.executor.cores": "1",
            "spark.executor.memory": "512m",
            "spark.driver.memory": "768m",
            "spark.yarn.am.memory": "512m",
            "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python,
            "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.executorEnv.PYSPARK_PYTHON": python,
            "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
            "spark.pyspark.python": python,
            "spark.yarn.scheduler.heartbeat.interval-ms": "500",
            "spark.yarn.report.interval": "500ms",
        }

    def applications(self, states: str | None = None) -> list[dict[str, Any]]:
        """The ResourceManager's applications (REST: ``/ws/v1/cluster/apps``)."""
        url = f"{self.webapp}/ws/v1/cluster/apps" + (f"?states={states}" if states else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        return list((body.get("apps") or {}).get("app") or [])

    def application(self, app_id: str) -> dict[str, Any]:
        """One application's report (state, finalStatus, attempts...)."""
        with urllib.request.urlopen(f"{self.webapp}/ws/v1/cluster/apps/{app_id}", timeout=10) as resp:
            return dict(json.load(resp)["app"])

    def attempts(self, app_id: str) -> list[dict[str, Any]]:
        """The application's attempts (one per AM, i.e. per cluster-mode driver, started)."""
        url = f"{self.webapp}/ws/v1/cluster/apps/{app_id}/appattempts"
        with urllib.request.urlopen(url, timeout=10) as resp:
            return list(json.load(resp)["appAttempts"]["appAttempt"])

    def container_logs(self, app_id: str, tail: int = 3000) -> str:
        """The end of each container's stdout and stderr of ``app_id`` (the driver's, in cluster
        mode, is the first attempt's first container): for a test's failure message."""
        out = []
        for dirpath, _dirs, files in sorted(os.walk(self.root)):
            if os.path.basename(os.path.dirname(dirpath)) != app_id:
                continue
            for name in ("stderr", "stdout"):
                if name in files:
                    text = log_tail(os.path.join(dirpath, name), tail)
                    out.append(f"--- {os.path.basename(dirpath)}/{name}\n{text}")
        return "\n".join(out)

    def staging_exists(self, app_id: str) -> bool:
        """Whether Spark's staging directory of ``app_id`` is on HDFS (WebHDFS)."""
        import getpass
        import urllib.error

        path = f"/user/{getpass.getuser()}/.sparkStaging/{app_id}"
        url = f"http://{self.props['dfs.namenode.http-address']}/webhdfs/v1{path}?op=GETFILESTATUS"
        try:
            with urllib.request.urlopen(url, timeout=10):
                return True
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise

    def wait_finished(self, app_id: str, timeout: float = 180.0) -> dict[str, Any]:
        """Until ``app_id`` is FINISHED, FAILED or KILLED; its report."""
        deadline = time.monotonic() + timeout
        while True:
            app = self.application(app_id)
            if app["state"] in ("FINISHED", "FAILED", "KILLED"):
                return app
            if time.monotonic() > deadline:
                raise AssertionError(f"{app_id} still {app['state']} after {timeout:.0f}s")
            time.sleep(0.5)


def _java_home(java: str) -> str:
    return os.path.dirname(os.path.dirname(os.path.realpath(java)))
