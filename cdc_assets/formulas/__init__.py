"""The formula columns' Dagster side (`freshness.py`: their age as metadata and the check `formulas_fresh`); the
refresh itself is replication/formulas/."""
