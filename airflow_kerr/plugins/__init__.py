"""The DLQ view in the Airflow UI: an Airflow plugin with its API routes and pages."""
