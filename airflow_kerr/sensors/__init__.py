"""Airflow sensors."""
