"""airflow-delta: Delta Lake tables from Apache Airflow, without the JVM Delta library."""

__version__ = "0.1.0"
