"""Code that runs inside spark-submit and on executors. Imports no Airflow."""
