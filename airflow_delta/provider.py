"""Provider metadata for Apache Airflow (entry point `apache_airflow_provider`).

Airflow calls `get_provider_info()` to discover this package; it must not import Airflow.
"""

from __future__ import annotations

from typing import Any

from airflow_delta import __version__


def get_provider_info() -> dict[str, Any]:
    """The provider's description in the shape of Airflow's provider_info schema.

    Example::

        >>> get_provider_info()["package-name"]
        'airflow-delta'
    """
    integration = "Delta Lake"
    return {
        "package-name": "airflow-delta",
        "name": "Delta Lake (airflow-delta)",
        "description": (
            "Delta Lake tables from Apache Airflow, without Databricks or the JVM Delta "
            "library: a pure-Python Delta transaction engine, a PySpark data plane and "
            "Airflow operators."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": integration,
                "external-doc-url": "https://delta.io",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {"integration-name": integration, "python-modules": ["airflow_delta.hooks.delta"]}
        ],
        "operators": [
            {
                "integration-name": integration,
                "python-modules": [
                    "airflow_delta.operators.write",
                    "airflow_delta.operators.merge",
                    "airflow_delta.operators.checkpoint",
                    "airflow_delta.operators.dml",
                    "airflow_delta.operators.optimize",
                    "airflow_delta.operators.restore",
                ],
            }
        ],
        "sensors": [
            {"integration-name": integration, "python-modules": ["airflow_delta.sensors.version"]}
        ],
        "triggers": [
            {"integration-name": integration, "python-modules": ["airflow_delta.triggers.version"]}
        ],
        "connection-types": [
            {
                "connection-type": "delta",
                "hook-class-name": "airflow_delta.hooks.delta.DeltaHook",
                "hook-name": "Delta Lake",
                # The connection form (read by Airflow >= 3.2 instead of hook methods).
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "Endpoint URL (S3-compatible stores, optional)",
                        "login": "Access key ID (optional)",
                        "password": "Secret access key (optional)",
                        "extra": "Storage options (JSON, passed to fsspec)",
                    },
                    "placeholders": {
                        "host": "http://minio:9000",
                        "login": "AKIA...",
                        "extra": '{"client_kwargs": {"region_name": "eu-west-1"}}',
                    },
                },
            }
        ],
    }
