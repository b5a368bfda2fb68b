"""The one adapter over the Spark provider's ``SparkSubmitHook``: the only module that knows
its insides.

Two things submit mode needs are not in the hook's public API:

- the connection's ``master`` and ``deploy-mode``, which the hook resolves in its
  constructor into the private ``_connection`` dict (the master is probed before
  submitting, the deploy mode decides how the source's credentials reach the driver);
- the private ``_env_vars``, through which the hook passes environment variables to a
  driver on the cluster as ``spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*``
  settings. It is set after the constructor, because only the resolved connection says
  whether the driver runs on the cluster (and a client-mode driver gets them from the
  process environment instead, off every command line);
- the private ``_yarn_application_id`` the hook reads from spark-submit's output in YARN
  cluster mode: the task log names it, and :meth:`SparkSubmit.on_kill` kills it when the
  worker has no ``yarn`` command (the hook's own kill runs ``yarn application -kill``, and a
  worker with only the pyspark wheel has no Hadoop install: the application would run on).

Why the provider is pinned (``apache-airflow-providers-apache-spark>=6.3,<6.4`` in
pyproject.toml): a provider release may rename or reshape these private attributes without
notice, and this adapter would then read an empty connection (no master probe, the
credentials passed as in client mode) instead of failing. A new minor release is admitted
by moving the pin once the tests of submit mode (tests/regressions/test_submit_adversary.py,
tests/airflow/test_cluster.py) pass against it, and this module is the one place to adapt.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any

from airflow_eod.core.errors import ConfigurationError

# SparkSubmitHook arguments the submit runner sets itself.
_OWN_SUBMIT_ARGS = ("conf", "conn_id", "jars", "name", "application_args", "env_vars")
# Settings under which spark-submit returns before the driver ends: the operator would ask
# the table while the driver may still commit, and fail a load that then lands.
_EARLY_RETURN = ("track_driver_via_k8s_api", "yarn_track_via_rm_api")
_EARLY_RETURN_CONF = ("spark.yarn.submit.waitAppCompletion", "spark.kubernetes.submission.waitAppCompletion")
# YARN's own client, in the hadoop-client-api jar every Spark distribution (and the pyspark
# wheel) carries: `yarn application -kill` without a Hadoop install.
_YARN_CLI_CLASS = "org.apache.hadoop.yarn.client.cli.ApplicationCLI"
_KILL_TIMEOUT_S = 60.0
# How long spark-submit is given to see its application killed and remove its staging
# directory (it asks YARN every spark.yarn.report.interval, 1 s by default).
_CLEANUP_WAIT_S = 10.0
log = logging.getLogger(__name__)


def _hook_class() -> Any:
    # Imported when used: the provider is imported only by a task that submits.
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    return SparkSubmitHook


def check_submit_kwargs(submit_kwargs: Mapping[str, Any], spark_conf: Mapping[str, str]) -> None:
    """Refuse, when the DAG is parsed, ``submit_kwargs`` that SparkSubmitHook does not take,
    that the submit runner sets itself, or that make spark-submit return before its driver
    ends.

    :param submit_kwargs: more ``SparkSubmitHook`` arguments.
    :param spark_conf: the ``--conf`` settings of spark-submit.
    """
    for key in _EARLY_RETURN_CONF:
        if str(spark_conf.get(key, "true")).strip().lower() == "false":
            raise ConfigurationError(f"spark_conf[{key!r}] = false: the task must wait for the driver to end")
    if not submit_kwargs:
        return
    known = set(inspect.signature(_hook_class().__init__).parameters) - {"self"}
    for key in submit_kwargs:
        if key in _OWN_SUBMIT_ARGS:
            raise ConfigurationError(
                f"submit_kwargs[{key!r}]: the operator sets it (use spark_conf, spark_conn_id or jars)"
            )
        if key not in known:
            raise ConfigurationError(f"submit_kwargs[{key!r}] is not an argument of SparkSubmitHook")
        if key in _EARLY_RETURN and submit_kwargs[key]:
            raise ConfigurationError(
                f"submit_kwargs[{key!r}]: spark-submit would return before the driver ends, and "
                "the task must ask the table after the driver has ended"
            )


class SparkSubmit:
    """One spark-submit of an application, through ``SparkSubmitHook``.

    :param conf: the ``--conf`` settings.
    :param conn_id: the Spark connection.
    :param jars: comma-separated jars.
    :param name: the application's name.
    :param application_args: the application's arguments.
    :param submit_kwargs: more ``SparkSubmitHook`` arguments (checked by
        :func:`check_submit_kwargs`).
    """

    def __init__(
        self,
        *,
        conf: Mapping[str, str],
        conn_id: str,
        jars: str | None,
        name: str,
        application_args: list[str],
        submit_kwargs: Mapping[str, Any],
    ) -> None:
        self._hook = _hook_class()(
            conf=dict(conf),
            conn_id=conn_id,
            jars=jars,
            name=name,
            application_args=application_args,
            **submit_kwargs,
        )

    def _connection(self) -> Mapping[str, Any]:
        connection = getattr(self._hook, "_connection", None)
        return connection if isinstance(connection, Mapping) else {}

    @property
    def master(self) -> str | None:
        """The master URL of the connection, as the hook resolved it."""
        master = self._connection().get("master")
        return None if master is None else str(master)

    @property
    def driver_on_cluster(self) -> bool:
        """Whether the driver runs on the cluster (``deploy-mode cluster``)."""
        return self._connection().get("deploy_mode") == "cluster"

    def pass_to_cluster_driver(self, env: Mapping[str, str]) -> None:
        """Pass ``env`` to a driver on the cluster, as the hook passes its ``env_vars``
        (appMasterEnv/driverEnv settings, masked in the log)."""
        self._hook._env_vars = dict(env)

    def submit(self, application: str, *, env: Mapping[str, str] | None = None) -> None:
        """Run spark-submit of ``application`` until it returns.

        :param env: the whole environment of spark-submit (and of a client-mode driver);
            the worker's own when ``None``.
        """
        popen: dict[str, Any] = {} if env is None else {"env": dict(env)}
        self._hook.submit(application, **popen)

    @property
    def application_id(self) -> str | None:
        """The YARN application of a cluster-mode submit, once spark-submit has named it."""
        found = getattr(self._hook, "_yarn_application_id", None)
        return found if isinstance(found, str) else None

    def on_kill(self) -> None:
        """Stop the submitted application, best effort: spark-submit, and in YARN cluster mode
        the application itself (its driver does not end with spark-submit)."""
        app = self.application_id
        if app is None:
            self._hook.on_kill()
            return
        # The application first, while spark-submit still watches it: seeing it KILLED,
        # spark-submit removes its staging directory on HDFS, whose __spark_conf__.zip holds
        # the driver's appMasterEnv settings (the source's password, the storage options) in
        # clear. In the hook's order (spark-submit SIGKILLed first) nothing removes it: the
        # ApplicationMaster of an attempt that is not the last leaves it for a re-attempt.
        killed = kill_yarn_application(app, env=self._kill_env())
        process = getattr(self._hook, "_submit_sp", None)
        if killed and process is not None:
            try:
                process.wait(timeout=_CLEANUP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass  # the hook kills it now
        self._hook._yarn_application_id = None  # killed above: the hook kills spark-submit only
        try:
            self._hook.on_kill()
        finally:
            self._hook._yarn_application_id = app

    def _kill_env(self) -> dict[str, str]:
        """The environment of the kill, as the hook gives its own: its ``env_vars``, and the
        ticket cache it renews from the connection's keytab."""
        env = dict(getattr(self._hook, "_env", None) or {})
        connection = self._connection()
        if connection.get("keytab") is not None and connection.get("principal") is not None:
            from airflow.providers.common.compat.sdk import conf as airflow_conf
            from airflow.security.kerberos import renew_from_kt

            renew_from_kt(connection["principal"], connection["keytab"], exit_on_fail=False)
            env["KRB5CCNAME"] = airflow_conf.get_mandatory_value("kerberos", "ccache")
        return env


def hadoop_yarn_command() -> bool:
    """Whether the ``yarn`` on PATH is Hadoop's (``hadoop`` beside it, as in every Hadoop
    install and package): a worker image with Node.js tooling has the JavaScript package
    manager ``yarn``, whose ``yarn application -kill`` fails and would leave the application
    running."""
    found = shutil.which("yarn")
    return found is not None and os.path.exists(os.path.join(os.path.dirname(found), "hadoop"))


def spark_jars_dir() -> str | None:
    """The jars of the Spark that submits: ``$SPARK_HOME/jars``, else the pyspark wheel's."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return os.path.join(home, "jars")
    import importlib.util

    found = importlib.util.find_spec("pyspark")
    if found is None or not found.submodule_search_locations:
        return None
    return os.path.join(next(iter(found.submodule_search_locations)), "jars")


def kill_yarn_application(app_id: str, *, env: Mapping[str, str] | None = None) -> bool:
    """Kill a YARN application with Hadoop's ``yarn application -kill``, or on a worker that
    has Spark but no Hadoop install, with YARN's own client (``ApplicationCLI``) on Spark's
    jars as that command would, with the worker's ``HADOOP_CONF_DIR`` (and its Kerberos
    ticket cache).

    :param app_id: the application, ``application_<cluster>_<n>``.
    :param env: more environment (the hook's ``env_vars``).
    :returns: whether YARN said it killed it (or it had already ended).
    """
    full_env = {**os.environ, **(env or {})}
    if hadoop_yarn_command():
        return _run_kill(["yarn", "application", "-kill", app_id], full_env, app_id)
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    jars = spark_jars_dir()
    if jars is None:
        log.warning(
            "could not kill YARN application %s: no SPARK_HOME and no pyspark to find Spark's jars", app_id
        )
        return False
    # As Hadoop's `yarn` script does: the configuration directories first on the class path
    # (yarn-site.xml names the ResourceManager), then the client's jars.
    conf_dirs = [full_env[k] for k in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if full_env.get(k)]
    class_path = os.pathsep.join([*conf_dirs, os.path.join(jars, "*")])
    # A ResourceManager that does not answer is given up on in time (YARN's client would
    # retry for 15 minutes). The command's name comes first, as the `yarn` script passes it.
    wait = f"yarn.resourcemanager.connect.max-wait.ms={int(_KILL_TIMEOUT_S * 1000 / 2)}"
    argv = [java, "-cp", class_path, _YARN_CLI_CLASS, "application", "-D", wait, "-kill", app_id]
    return _run_kill(argv, full_env, app_id)


def _run_kill(argv: list[str], full_env: dict[str, str], app_id: str) -> bool:
    try:
        done = subprocess.run(
            argv,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=_KILL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not kill YARN application %s: %s", app_id, exc)
        return False
    said = (done.stdout + done.stderr).strip().splitlines()
    log.info("YARN application %s: kill returned %s: %s", app_id, done.returncode, said[-1] if said else "")
    return done.returncode == 0
