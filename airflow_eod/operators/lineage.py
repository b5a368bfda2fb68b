"""OpenLineage for the load operators (the optional extra ``airflow-eod[openlineage]``): the
datasets a load reads, and the table it writes with the batch's row count."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from airflow_eod.core.result import LoadResult


class OpenLineageMixin:
    """The lineage part of :class:`~airflow_eod.operators.delta_load.BaseDeltaLoadOperator`:
    it reads the operator's ``table_uri`` and the result of its last load (``_result``)."""

    table_uri: str
    _result: LoadResult | None

    def lineage_inputs(self) -> list[tuple[str, str]]:
        """The (namespace, name) of each dataset this load reads (OpenLineage naming)."""
        return []

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage facets of the load: its input datasets, the table as output with the
        batch's row count. ``None`` without the OpenLineage provider installed (the imports
        are here, so that nothing of it is imported unless Airflow asks for lineage)."""
        try:
            from airflow.providers.common.compat.openlineage.facet import (
                InputDataset,
                OutputDataset,
                OutputStatisticsOutputDatasetFacet,
            )
            from airflow.providers.openlineage.extractors import OperatorLineage
        except ImportError:
            return None
        result = self._result
        facets: dict[str, Any] = {}
        if result is not None and result.outcome == "committed":
            facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(rowCount=result.rows)
        table = TableRef.parse(self.table_uri)
        # OpenLineage's naming: "file" and the path, or "s3://bucket" and the key.
        if table.is_local:
            namespace, name = "file", table.path
        else:
            bucket, _, name = table.location.partition("://")[2].partition("/")
            namespace = f"{table.scheme}://{bucket}"
        return OperatorLineage(
            inputs=[InputDataset(namespace=ns, name=name) for ns, name in self.lineage_inputs()],
            outputs=[OutputDataset(namespace=namespace, name=name, outputFacets=facets)],
        )
