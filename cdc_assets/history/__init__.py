"""The history tables' Dagster definitions (`assets.py`, `checks.py`); how a history is kept is
replication/history/."""
