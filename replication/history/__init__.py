"""History tables (SCD type 2): `<Object>__history`, one row per version of each record, for `history: true` objects.

**A second output of the replica's run, not an asset of its own.** The versions of a record are the states the
replica's fold goes through: one per Salesforce transaction it applies (spark_ops/history.py, the fold run as a
scan over the same change rows and current rows, with the same run cut), and one per row a sync writes that changes
the record (resync, initial load, reconcile, poll: `_sf_source` says which). Only the replica's step has those
inputs in hand, so the same step writes both tables; a separate asset would have to derive them again from
change_events and the replica's log (text diffs, describe drift, held transactions: a second copy of apply), and
every sensor would have to request it with its replica. In Dagster the history shows as
`salesforce_history/<Object>_history`, materialized by the replica's step (cdc_assets/history/assets.py), and its
check sits on the replica.

**Same commit cycle, crash-safe, without a two-table transaction** (Delta has none):
1. the apply step derives the versions of the transactions it applies and *stages* them as a Parquet file
   (resources/staged.py) before its replica commit, which names the file in its state (`HistoryMark`);
2. after the replica's last commit of the run, `catch_up` lands every replica version the history does not have
   yet, in order: an apply commit's staged file, or a sync commit's rows (its Change Data Feed), each as one merge
   that closes the records' current versions and moves the history's checkpoint (`cdc_history`) past it.
A crash before the replica commit leaves a file nothing names (removed later); after it, the next run of the
replica lands exactly that file. The history never holds a version the replica did not commit, and is behind it
only between the two commits of one run (or until the next run, after a crash there).

Modules: `chain.py` (validity, numbering, sync versions: pure pyarrow), `stage.py` (apply's side), `catch_up.py`,
`backfill.py` (history turned on for an existing replica); the Dagster side is cdc_assets/history/ (`assets.py`,
`checks.py`).
"""
