"""``dag_run.conf`` overrides of a source setting for one run of one pipeline (the Kafka
source's ways out that need no DAG change: ``eod_data_loss``, ``eod_topic_changes``)."""

from __future__ import annotations

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.run_conf import source_overrides

ALLOWED = {"eod_data_loss": ("fail", "skip"), "eod_topic_changes": ("fail", "accept")}


def test_the_named_pipeline_takes_the_settings_for_this_run() -> None:
    conf = {"eod_pipeline": "shop.orders", "eod_data_loss": "skip", "eod_topic_changes": "accept"}
    assert source_overrides(conf, "shop.orders", ALLOWED) == {"data_loss": "skip", "topic_changes": "accept"}
    assert source_overrides(
        {"eod_pipeline": ["x", "shop.orders"], "eod_data_loss": "skip"}, "shop.orders", ALLOWED
    ) == {"data_loss": "skip"}


def test_another_pipeline_and_a_conf_without_the_keys_change_nothing() -> None:
    assert source_overrides({"eod_pipeline": "other", "eod_data_loss": "skip"}, "shop.orders", ALLOWED) == {}
    assert (
        source_overrides({"eod_restate": True, "eod_pipeline": "shop.orders"}, "shop.orders", ALLOWED) == {}
    )
    assert source_overrides({}, "shop.orders", ALLOWED) == {}


def test_a_setting_without_a_pipeline_or_with_a_value_not_allowed_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="eod_pipeline"):
        source_overrides({"eod_data_loss": "skip"}, "shop.orders", ALLOWED)
    with pytest.raises(ConfigurationError, match="must be one of"):
        source_overrides({"eod_pipeline": "shop.orders", "eod_data_loss": "ignore"}, "shop.orders", ALLOWED)
    with pytest.raises(ConfigurationError, match="must name the pipeline"):
        source_overrides({"eod_pipeline": "", "eod_topic_changes": "accept"}, "shop.orders", ALLOWED)
