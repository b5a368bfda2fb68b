"""The table of Delta table features (docs/reference.md, "Tables with Delta table
features") says exactly what the code does: one row per feature the code knows, with the
delta-rs engine's answer from ``table_compat.TABLE_FEATURES``; and the Delta Spark tier
(tests/delta_spark/test_delta_spark_features.py) has a case for each of them."""

from __future__ import annotations

import os
import re

from airflow_eod.core.delta import compat as table_compat
from tests.delta_spark.test_delta_spark_features import CASES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_reference_lists_exactly_the_features_the_code_knows() -> None:
    with open(os.path.join(REPO, "docs", "reference.md")) as fh:
        text = fh.read()
    section = text[text.index("### Tables with Delta table features") :]
    section = section[: section.index("\n#", 1)]
    rows = re.findall(r"^\| `(\w+)` \| (writes|refuses) \| (writes|refuses) \|", section, re.M)
    assert {name for name, _, _ in rows} == set(table_compat.TABLE_FEATURES)
    assert len(rows) == len(table_compat.TABLE_FEATURES), "one row per feature"
    for name, rs, spark_engine in rows:
        assert (rs == "writes") == table_compat.TABLE_FEATURES[name].writes, name
        assert spark_engine == "writes", name


def test_every_feature_the_code_knows_has_a_delta_spark_case() -> None:
    assert {c.feature for c in CASES} == set(table_compat.TABLE_FEATURES)
    for c in CASES:
        assert c.delta_rs_writes == table_compat.TABLE_FEATURES[c.feature].writes, c.id


def test_a_feature_the_code_does_not_know_is_refused_by_name() -> None:
    from airflow_eod.core.delta.log import TableMetadata, TableProtocol

    class _Table:
        def protocol(self) -> TableProtocol:
            readers, writers = ["deletionVectors", "futureReaderThing"], ["appendOnly", "futureThing"]
            return TableProtocol(3, 7, readers, writers)

        def metadata(self) -> TableMetadata:
            return TableMetadata("id", None, None, '{"type":"struct","fields":[]}', [], None, {})

        def schema_json(self) -> str:
            return '{"type":"struct","fields":[]}'

    reasons = table_compat.unsupported_features(_Table())  # type: ignore[arg-type]
    assert reasons == [
        "table feature futureReaderThing (a feature airflow-eod does not know)",
        "table feature futureThing (a feature airflow-eod does not know)",
    ]


def test_a_legacy_protocol_table_is_refused_by_the_feature_it_uses() -> None:
    """A table of writer version 3 to 6 lists no features: what it uses is told by its
    metadata, and the refusal names the feature as for a table that lists it."""
    from airflow_eod.core.delta.log import TableMetadata, TableProtocol

    schema = (
        '{"type":"struct","fields":[{"name":"k","type":"long","nullable":true,'
        '"metadata":{"delta.identity.start":1,"delta.identity.step":1}}]}'
    )

    class _Table:
        def protocol(self) -> TableProtocol:
            return TableProtocol(1, 6, None, None)

        def metadata(self) -> TableMetadata:
            config = {"delta.constraints.k_positive": "k > 0"}
            return TableMetadata("id", None, None, schema, [], None, config)

        def schema_json(self) -> str:
            return schema

    reasons = table_compat.unsupported_features(_Table())  # type: ignore[arg-type]
    assert reasons[:2] == [
        f"table feature checkConstraints ({table_compat.TABLE_FEATURES['checkConstraints'].why})",
        f"table feature identityColumns ({table_compat.TABLE_FEATURES['identityColumns'].why})",
    ]
    assert "CHECK constraints (k_positive)" in reasons and "identity column k" in reasons
