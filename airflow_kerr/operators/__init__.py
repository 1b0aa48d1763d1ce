"""Airflow operators: the error-aware Spark submit, Kafka Connect connector control, the DLQ replay."""
