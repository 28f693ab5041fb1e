"""Operating the platform from the Dagster UI: resync or reconcile one object, acknowledge quarantine, pause and
resume one object (jobs.py, launched from the launchpad), the pause flag the sensors honour (pause.py), and
`replica_status_sensor`, which shows per object the lag, dirty count, last error and API budget (README
"Operating from the UI"). Erasing a record's files is replication/operate/erase_files.py."""
