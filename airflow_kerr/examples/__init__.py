"""Example pipeline code used by the example DAGs and the demo. Imports no Airflow: it runs on executors."""
