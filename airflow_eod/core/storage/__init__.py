"""Where airflow-eod's own bytes live: the storage seam and its local backend."""
