"""The embedded development stack: broker launcher, Kafka Connect stand-in, local Airflow UI, the kerr CLI."""
