"""Provider metadata read by Airflow's ProvidersManager through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_kerr import __version__


def get_provider_info() -> dict[str, Any]:
    """Describe the provider: package, versions and the modules Airflow should list."""
    return {
        "package-name": "airflow-provider-kerr",
        "name": "Kerr (error-tolerant Kafka, Spark and Kafka Connect pipelines)",
        "description": "Kafka Connect's errors.* contract (retry, tolerance, error context, dead-letter "
        "queue) for PySpark jobs, with sensors, connector control, DLQ replay and alerts.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Kerr",
                "external-doc-url": "https://kafka.apache.org/documentation/#connect",
                "tags": ["apache"],
            }
        ],
    }
