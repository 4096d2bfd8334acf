"""Airflow triggers of airflow-delta."""
