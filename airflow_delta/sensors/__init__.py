"""Airflow sensors of airflow-delta."""
