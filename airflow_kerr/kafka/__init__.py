"""Small confluent-kafka helpers shared by the Spark job and the Airflow side. No Airflow, no Spark."""
