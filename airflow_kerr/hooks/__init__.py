"""Airflow hooks: Kafka Connect REST client and Kafka helpers."""
