"""Reading a DLQ for people (the DLQ view): selection, discovery, summary, backlog, samples. No Airflow."""
