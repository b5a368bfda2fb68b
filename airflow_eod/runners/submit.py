"""The submit runner: the load job of each batch in a driver that spark-submit starts
through the Spark provider's ``SparkSubmitHook`` (:mod:`airflow_eod.hooks.spark_submit`);
then the table, not spark-submit's exit code, says what happened."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from airflow_eod.core.load_flow import FrozenBatch, decide_submitted
from airflow_eod.core.result import LoadResult
from airflow_eod.core.settle import settle_committed
from airflow_eod.core.source import Credentials, Source
from airflow_eod.core.spec_files import take_spec_files, write_spec
from airflow_eod.core.table_ref import TableRef
from airflow_eod.hooks.spark_submit import SparkSubmit
from airflow_eod.runners.spark_master import check_master_reachable
from airflow_eod.spark import driver
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
from airflow_eod.spark.session import REQUIRED_CONF, engine_conf, with_utc_jvms


class TaskLog(Protocol):
    """Where the submit's lines go: the task's logger (``logging`` or Airflow's)."""

    def info(self, msg: str, /, *args: Any) -> Any: ...

    def warning(self, msg: str, /, *args: Any) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class SubmitTarget:
    """Where and how a batch's driver is submitted.

    :param conn_id: the Spark connection (master, ``deploy-mode``, ``spark-binary``, ...).
    :param spark_conf: ``--conf`` settings of spark-submit.
    :param jars: comma-separated jars the load needs, such as a JDBC driver.
    :param submit_kwargs: more ``SparkSubmitHook`` arguments.
    """

    conn_id: str = "spark_default"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    jars: str | None = None
    submit_kwargs: Mapping[str, Any] = field(default_factory=dict)


# Spark's default (spark.redaction.regex), which hides a setting whose name or value matches
# it from the UI, the event log and YARN's logs. The table's storage options travel as
# EOD_STORAGE_OPTIONS (an appMasterEnv setting in YARN cluster mode), a name it misses.
SPARK_REDACTION_DEFAULT = "(?i)secret|password|token|access[.]?key"


def with_secrets_redacted(conf: Mapping[str, str], secrets: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with ``spark.redaction.regex`` extended to the driver's storage options
    (the DAG's own regex, or Spark's default, with ``|EOD_STORAGE_OPTIONS`` added), when they
    are among the driver's ``secrets``; otherwise ``conf`` as it is. Only then: the hook masks
    its logged command from a setting whose value names ``password`` onwards, so the setting
    would hide the arguments after it (``--jars``...) from the task log."""
    if driver.STORAGE_OPTIONS_ENV not in secrets:
        return dict(conf)
    regex = conf.get("spark.redaction.regex") or SPARK_REDACTION_DEFAULT
    if driver.STORAGE_OPTIONS_ENV not in regex:
        regex = f"{regex}|{driver.STORAGE_OPTIONS_ENV}"
    return {**conf, "spark.redaction.regex": regex}


def driver_secrets(credentials: Credentials | None, table: TableRef) -> dict[str, str]:
    """What a submitted driver takes from its environment, never from the spec: the source's
    credentials, and the storage options of a table on an object store (one JSON value,
    :data:`~airflow_eod.spark.driver.STORAGE_OPTIONS_ENV`). Every secret among them is
    registered with Airflow's secrets masker first, and so is the JSON as a whole: a
    command line that carries it (cluster deploy mode) is masked in the log.

    :param credentials: the source's credentials, or ``None``.
    :param table: the target table (its storage options, when it has any).
    """
    from airflow.sdk.log import mask_secret

    from airflow_eod.hooks.object_store import SECRET_OPTIONS

    secrets: dict[str, str] = {}
    if credentials is not None:
        mask_secret(credentials.password)
        secrets[driver.CREDENTIALS_USER_ENV] = credentials.user
        secrets[driver.CREDENTIALS_PASSWORD_ENV] = credentials.password
    options = table.storage_options
    if options:
        for name, value in options.items():
            if name.upper() in SECRET_OPTIONS:
                mask_secret(value)
        text = json.dumps(options, sort_keys=True)
        mask_secret(text)
        secrets[driver.STORAGE_OPTIONS_ENV] = text
    return secrets


class SubmitRun:
    """The ``run`` step of :func:`~airflow_eod.core.load_flow.load_batch` through
    spark-submit; made by :func:`submit_run`. :meth:`on_kill` stops the application of the
    batch being loaded."""

    def __init__(
        self,
        *,
        target: SubmitTarget,
        ref: TableRef,
        source: Source,
        settings: LoadSettings,
        credentials: Credentials | None,
        log: TaskLog,
    ) -> None:
        self.target = target
        self.table = ref
        self.source = source
        self.settings = settings
        self.credentials = credentials
        self.log = log
        self._submit: SparkSubmit | None = None

    def __call__(self, frozen: FrozenBatch) -> LoadResult:
        """spark-submit the driver for ``frozen``, then ask the table what happened."""
        spec = LoadSpec.for_batch(self.table, frozen, self.source, self.settings)
        label = frozen.plan.key.label
        # The spec lives beside the table: a driver that can write the table can read it,
        # on this machine or (deploy-mode cluster) on a node of the cluster.
        # Its name says whose it is: the settle step of a committed batch removes the specs a
        # SIGKILLed task left behind (airflow_eod.core.spec_files).
        spec_path = write_spec(self.table, frozen.plan.key, spec.generation, spec.attempt_id, spec.to_json())
        secrets = driver_secrets(self.credentials, self.table)
        target = self.target
        submit = self._submit = SparkSubmit(
            conf=with_secrets_redacted(
                {
                    **engine_conf(spec.settings.engine),
                    **with_utc_jvms(dict(target.spark_conf)),
                    **REQUIRED_CONF,
                },
                secrets,
            ),
            conn_id=target.conn_id,
            jars=target.jars,
            name=f"airflow-eod {label}"[:200],
            application_args=["--spec", spec_path],
            submit_kwargs=target.submit_kwargs,
        )
        env: dict[str, str] | None = None
        if secrets and submit.driver_on_cluster:
            # A remote driver gets them as the hook passes secrets: appMasterEnv/driverEnv
            # settings, masked in the log (and visible to `ps` on this worker; the hook
            # refuses them for a standalone master's cluster mode).
            submit.pass_to_cluster_driver(secrets)
            if (submit.master or "").startswith("yarn"):
                self.log.warning(
                    "batch %s: the source's credentials (or the table's storage options) reach the "
                    "driver on the YARN cluster in its environment (spark.yarn.appMasterEnv): Spark's "
                    "staging directory on HDFS holds them while the application runs, and YARN keeps "
                    "them in the NodeManager's localized __spark_conf__.zip and the container's "
                    "launch script, readable by the application's user and the NodeManager's; client "
                    "deploy mode keeps them on this worker (docs/deployment.md, YARN)",
                    label,
                )
        elif secrets:
            # A client-mode driver is a child of spark-submit: the process environment
            # reaches it, and keeps the password off every command line.
            env = {**os.environ, **secrets}
        self.log.info(
            "batch %s: submitting attempt %s (generation %d) through connection %r",
            label,
            spec.attempt_id,
            spec.generation,
            target.conn_id,
        )
        error: BaseException | None = None
        try:
            # A master that is down fails here in seconds, naming it, not in 90 s as a
            # stopped SparkContext (runners/spark_master.py).
            check_master_reachable(submit.master, target.conn_id)
            submit.submit(driver.__file__, env=env)
        except Exception as exc:  # the table decides, not spark-submit's exit code
            error = exc
        # spark-submit has returned: the driver has ended (waitAppCompletion is refused off),
        # and a retry writes a spec of its own.
        left = take_spec_files(self.table, frozen.plan.key, spec.generation, spec.attempt_id)
        result, status = decide_submitted(self.table, frozen, spec.attempt_id, error, driver.error_from(left))
        self.log.info(
            "batch %s: the table holds generation %s at version %s: %s (attempt %s)%s",
            label,
            status.committed_generation,
            status.table_version,
            result.outcome,
            status.manifest.attempt_id if status.manifest else None,
            f"; spark-submit ran YARN application {submit.application_id}" if submit.application_id else "",
        )
        # The driver does this after its commit; a driver killed right after it did not.
        settle_committed(self.table, status, spec.quarantine_table)
        return result

    def on_kill(self) -> None:
        """Stop the submitted Spark application, best effort."""
        if self._submit is not None:
            self._submit.on_kill()


def submit_run(
    target: SubmitTarget,
    ref: TableRef,
    source: Source,
    *,
    settings: LoadSettings | None = None,
    credentials: Credentials | None = None,
    log: TaskLog | None = None,
) -> SubmitRun:
    """The ``run`` step of :func:`~airflow_eod.core.load_flow.load_batch` through spark-submit.

    :param target: where and how the driver is submitted.
    :param ref: the target table.
    :param source: the source.
    :param settings: the load's settings (the defaults when ``None``); a transform must be
        ``"module:function"``, importable where the driver runs.
    :param credentials: the source's credentials: they reach the driver in its environment,
        never in the spec.
    :param log: where the submit's lines go (the task's log).
    """
    return SubmitRun(
        target=target,
        ref=ref,
        source=source,
        settings=settings or LoadSettings(),
        credentials=credentials,
        log=log or logging.getLogger(__name__),
    )
