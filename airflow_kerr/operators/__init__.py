"""Airflow operators."""
