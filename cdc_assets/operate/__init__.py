"""Operating the platform from the Dagster UI: one job per action, the objects in its config (jobs.py, launched from
the launchpad): ask for a resync, reconcile or describe run of objects (asks.py: the reconciliation sensor starts
it), erase records (erase.py), acknowledge quarantine, pause and resume objects (pause.py: the flag the sensors
honour); and `replica_status_sensor`, which shows per object the lag, dirty count, last error and API budget (README
"Operating from the UI"). Erasing a record's files is replication/operate/erase_files.py."""
