"""Airflow hooks of airflow-delta."""
