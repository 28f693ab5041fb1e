"""The changefeed's Dagster definitions (`export.py`: its assets and check); the export itself is
replication/changefeed/."""
