"""The DLQ replay engine: options, policy (select/fix/park), transactions, pacing, summary. No Airflow."""
