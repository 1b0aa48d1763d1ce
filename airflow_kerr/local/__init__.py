"""The embedded development stack: broker launcher, real Kafka Connect launcher, local Airflow UI, the kerr CLI."""
