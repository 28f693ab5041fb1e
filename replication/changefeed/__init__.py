"""Changefeeds of the replicas (YDB CDC semantics, YDB JSON or Debezium JSON lines).

- `config.py`: the `changefeed:` section of replication.yaml (imported by replication/config.py, so this package
  imports nothing eagerly: the exporter imports replication.config and would make a cycle).
- `rows.py`: the replica's Change Data Feed rows -> feed records (pure pyarrow + json).
- `cdc_assets/changefeed/export.py`: the exporter and the `changefeed/<Object>_changefeed` assets.
- `reader.py`: the consumer side (read from a position, replay).
- `debezium.schema.json`: JSON Schema of a debezium_json record (`DEBEZIUM_SCHEMA`).
"""

from pathlib import Path

DEBEZIUM_SCHEMA = Path(__file__).with_name("debezium.schema.json")
