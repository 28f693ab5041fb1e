"""Polling replication for objects without Change Data Capture (`mode: poll` in replication.yaml).

- `run.py`: one poll run: the query since the cursor (on the object's cursor field), REST or Bulk pages, one Delta
  commit each, resumable from a Bulk locator; the design notes;
- `rows.py`: the merge rule on Arrow rows (which polled rows move their record forward) and the cursor they leave;
- `compare.py`: the Id comparison with the org, both ways (purged, late and reappeared records), its delete bound.
"""
