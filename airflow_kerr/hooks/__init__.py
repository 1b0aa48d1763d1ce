"""Thin Airflow hooks over kafka/ and connect/: the Kafka cluster and the Kafka Connect REST API."""
