"""Restating or re-freezing a batch from ``dag_run.conf``: the way out that needs no DAG change.

Every load operator honours these keys of the DAG run's conf, whatever its DAG declares::

    {"eod_pipeline": "<pipeline id>", "eod_restate": true, "eod_restate_batch_key": "<key>"}

A run triggered with them (UI "Trigger DAG w/ config", ``airflow dags trigger --conf``, or
the REST API) re-freezes the named batch from the source as it is now when the table never
committed it (an input that changed after planning), or restates it (a new generation swapped
in for the committed one in one commit). Without ``eod_restate_batch_key`` the run restates
its own batch (its interval, or the offset batch it loads).

Scoping: ``eod_pipeline`` is required, and only the load tasks whose pipeline id it names
react (a string, or a list of pipeline ids); every other load task of the run loads as
usual. A conf that asks for a restatement without naming a pipeline fails every load task
of the run: a DAG with several load tasks must never restate the wrong one. The conf is
Airflow's own record of the run, so every try and every clear of that run restates the same
batch, and the run's restatement claim in the plan log makes it one restatement, not one
per try.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planlog.restatement import CONF_BATCH_KEY as BATCH_KEY
from airflow_eod.core.planlog.restatement import CONF_PIPELINE as PIPELINE
from airflow_eod.core.planlog.restatement import CONF_RESTATE as RESTATE

log = logging.getLogger(__name__)

KEYS = (RESTATE, BATCH_KEY, PIPELINE)


def as_bool(name: str, value: Any) -> bool:
    """``value`` as a boolean (a bool, or its usual spellings in a templated string)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none"):
        return False
    raise ConfigurationError(f"{name} must be true or false, not {value!r}")


def conf_of(context: Any) -> Mapping[str, Any]:
    """The run's ``dag_run.conf`` (empty for a run without one, or a hand-made context)."""
    conf = getattr(context.get("dag_run"), "conf", None)
    return conf if isinstance(conf, Mapping) else {}


def _named(value: Any) -> list[str]:
    if isinstance(value, str) and value.strip():
        return [value.strip()]
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) and v.strip() for v in value):
        return [v.strip() for v in value]
    raise ConfigurationError(
        f"dag_run.conf {PIPELINE!r} must name the pipeline to restate (a pipeline id, or a list "
        f"of them), not {value!r}"
    )


def restate_request(
    conf: Mapping[str, Any], pipeline_id: str, restate: bool, restate_batch_key: str | None
) -> tuple[bool, str | None]:
    """What this task restates: the operator's own ``restate``/``restate_batch_key``, unless
    the run's conf asks for a restatement of this pipeline.

    :param conf: the run's ``dag_run.conf``.
    :param pipeline_id: this task's pipeline id.
    :param restate: the operator's (rendered) ``restate``.
    :param restate_batch_key: the operator's (rendered) ``restate_batch_key``.
    :raises ConfigurationError: conf keys that do not say which pipeline, or malformed values.
    """
    asked = {k: conf[k] for k in KEYS if k in conf}
    if not asked:
        return restate, restate_batch_key
    wants = as_bool(f"dag_run.conf {RESTATE!r}", asked.get(RESTATE, False))
    key = asked.get(BATCH_KEY)
    if key is not None and not isinstance(key, str):
        raise ConfigurationError(f"dag_run.conf {BATCH_KEY!r} must be a batch key (a string), not {key!r}")
    key = (key or "").strip() or None
    if not wants and key is None:
        return restate, restate_batch_key
    if PIPELINE not in asked:
        raise ConfigurationError(
            f"dag_run.conf asks for a restatement ({json_keys(asked)}) but does not say of which "
            f"pipeline: add {PIPELINE!r} with the pipeline id (this task's is {pipeline_id!r}), so "
            "that no other load task of the DAG restates a batch of its own"
        )
    if pipeline_id not in _named(asked[PIPELINE]):
        log.info(
            "dag_run.conf restates pipeline(s) %s; this task's pipeline %s loads as usual",
            _named(asked[PIPELINE]),
            pipeline_id,
        )
        return restate, restate_batch_key
    if not wants:
        raise ConfigurationError(
            f"dag_run.conf names batch {key!r} of pipeline {pipeline_id} but not {RESTATE!r}: true; "
            "add it to restate (or re-freeze) that batch"
        )
    if key is not None:
        # The key names a plan-log file: anyone who may trigger the DAG may write it, so
        # only a key of the shape batch keys have is taken (no "..", no "/").
        BatchKey(pipeline_id, key)
    what = f"batch {key}" if key else "this run's batch"
    log.info("dag_run.conf: restating %s of pipeline %s", what, pipeline_id)
    return True, key


def json_keys(asked: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(asked.items()))


def source_overrides(
    conf: Mapping[str, Any], pipeline_id: str, allowed: Mapping[str, tuple[str, ...]]
) -> dict[str, str]:
    """The source settings this run's conf sets for one run of this pipeline, such as
    ``{"eod_pipeline": "<id>", "eod_data_loss": "skip"}`` (a Kafka source's way out that
    needs no DAG change). Scoped as a restatement is: only the pipelines ``eod_pipeline``
    names take them, and a conf that sets one without naming a pipeline fails.

    :param conf: the run's ``dag_run.conf``.
    :param pipeline_id: this task's pipeline id.
    :param allowed: conf key -> the values it may take; the setting's name is the key
        without its ``eod_`` prefix.
    :raises ConfigurationError: a value not allowed, or no ``eod_pipeline``.
    """
    asked = {k: conf[k] for k in allowed if k in conf}
    if not asked:
        return {}
    if PIPELINE not in conf:
        raise ConfigurationError(
            f"dag_run.conf sets {json_keys(asked)} but does not say for which pipeline: add "
            f"{PIPELINE!r} with the pipeline id (this task's is {pipeline_id!r})"
        )
    if pipeline_id not in _named(conf[PIPELINE]):
        return {}
    out: dict[str, str] = {}
    for key, value in asked.items():
        if value not in allowed[key]:
            raise ConfigurationError(f"dag_run.conf {key!r} must be one of {allowed[key]}, not {value!r}")
        out[key.removeprefix("eod_")] = str(value)
    log.info("dag_run.conf: pipeline %s runs with %s for this run", pipeline_id, out)
    return out
