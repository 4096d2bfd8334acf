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
    # Hooks, operators, sensors, triggers and the `delta` connection type are listed here
    # once their modules exist.
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
                "integration-name": "Delta Lake",
                "external-doc-url": "https://delta.io",
                "tags": ["software"],
            }
        ],
    }
