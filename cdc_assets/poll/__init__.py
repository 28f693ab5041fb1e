"""Polling replication for objects without Change Data Capture (`mode: poll` in replication.yaml).

- `run.py`: one poll run: the query since the cursor, REST or Bulk pages, one Delta commit each, the design notes;
- `rows.py`: the merge rule on Arrow rows (which polled rows move their record forward) and the cursor they leave.
"""
