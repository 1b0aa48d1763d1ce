"""Small confluent-kafka helpers: offsets, DLQ and metrics-topic reads, client-error classification. No Airflow."""
