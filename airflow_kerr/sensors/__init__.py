"""Airflow sensors: DLQ growth, tolerance breach and recovery, Kafka Connect connector state."""
