"""Table upkeep: compaction, vacuum and change_events payload retention, as scheduled Dagster jobs.

Every run of the platform adds files: change_events a few per run, each replica merge rewrites the files of the
partitions it touched and leaves the old ones behind. Left alone, loading and reading a table slows with its age.
Upkeep keeps it flat, one table at a time:

- `compact.py`: `optimize.compact` (optionally `optimize.z_order`) of one table; a dataChange=false commit, so a
  replica's Change Data Feed emits nothing for it and the changefeed stays exact;
- `vacuum.py`: deletes files no version younger than the retention references (`vacuum_retention_hours`);
- `retention.py`: drops the *payload* (`fields`, the values) of change_events rows that every reader is done
  with, keeping each row's identity, so dedup and the changefeed's transaction-key lookup stay exact;
- `cdc_assets/upkeep/jobs.py`: the Dagster wiring: two jobs on a schedule, `upkeep_replicas` (every replica, one
  table at a time under its host lock) and `upkeep_change_events` (in its pool): never beside a writer of the same
  table, reporting files and bytes before/after and rows trimmed as an observation of the table's asset (plots).

None of these commits carries checkpoint state, and none needs to: a run finds its table's state through the app
transaction `cdc_state.<key>` (resources/delta.py), which names the commit holding it however many commits upkeep
made since; app transactions survive compaction, vacuum and log checkpoints.
"""
