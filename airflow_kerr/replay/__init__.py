"""The DLQ replay engine: the EOS loop, its pre-flight, batch decisions, failures, policy, transactions. No Airflow."""
