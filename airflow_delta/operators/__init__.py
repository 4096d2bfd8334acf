"""Airflow operators of airflow-delta."""
