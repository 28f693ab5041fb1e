"""`_quarantine`: one row per bad line, with its reason (docs/design/contract.md §9), written by ingest and by apply.

Rows are keyed by (file, line): recording the same line again (a re-run after a crash) inserts nothing. A person
acknowledges the lines reviewed (`acknowledge_quarantine`, the operator job of that name): an empty commit naming
the instant, after which the checks count only newer lines and upkeep may prune the older ones.

**Raw lines hold the org's values in clear**, the fields replication.yaml hashes or leaves out included: whoever may
read `_quarantine` may read those. With `redact_quarantine: true` (an object setting), `redacted` replaces the
values of those fields in a quarantined line of that object with `"<redacted>"` (a compound value: the parts
concerned), in the CometD payload or the Datastream `payload`; a line that is not JSON, or names no object, is
replaced whole when any object asks for redaction (it cannot be told apart); an object not replicated is left as landed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from object_schema.describe import ObjectSchema
from replication.state import QUARANTINE_ACK, QuarantineAck, QuarantineState
from resources.delta import QUARANTINE, DeltaWarehouse
from resources.printable import loggable_reason, printable

log = logging.getLogger(__name__)

LOGGED = 20  # warning lines per call; the table has them all
REDACTED = "<redacted>"
REDACTED_LINE = "<redacted: a quarantined line that does not read as one object's event>"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _payloads(event: dict) -> tuple[str | None, list[dict]]:
    """The object a landed event names and the mappings holding its field values (CometD or Datastream)."""
    data = inner if isinstance(inner := event.get("data"), dict) else event
    payload = data.get("payload")
    if isinstance(payload, dict) and isinstance(payload.get("ChangeEventHeader"), dict):
        return payload["ChangeEventHeader"].get("entityName"), [payload]
    meta = source if isinstance(source := event.get("source_metadata"), dict) else {}
    name = event.get("object") or meta.get("object_name")
    return name, [payload] if isinstance(payload, dict) else []


def _redact_line(raw: str, schemas: Mapping[str, ObjectSchema]) -> str:
    try:
        event = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or JSON Python does not read (an integer of 4,300+ digits)
        return REDACTED_LINE
    name, payloads = _payloads(event) if isinstance(event, dict) else (None, [])
    if not isinstance(name, str):
        return REDACTED_LINE
    if (schema := schemas.get(name)) is None:  # an object not replicated: nothing of it is protected
        return raw
    if not schema.redact_quarantine:
        return raw
    hidden = lambda field: field in schema.hashed or not schema.selects(field)  # noqa: E731
    for payload in payloads:
        for key, value in payload.items():
            if key in schema.compound and isinstance(value, dict):
                parts = schema.compound[key]
                payload[key] = {k: REDACTED if hidden(parts.get(k, f"{key}.{k}")) else v for k, v in value.items()}
            elif key != "ChangeEventHeader" and hidden(key):
                payload[key] = REDACTED
    try:
        return json.dumps(event)
    except RecursionError:  # nested about as deep as Python reads: written back, it is one level too deep
        return REDACTED_LINE


def quarantine_example(row: dict) -> str:
    """A quarantined line as a log line or a metadata example shows it: `file:line: reason`, with the file name
    escaped and the value a reason quotes left out (resources/printable.py); the table keeps both as landed."""
    return f"{printable(row['source_file'])}:{row['source_line']}: {loggable_reason(row['reason'])}"


def redacted(entries: pa.Table, schemas: Mapping[str, ObjectSchema], redact: bool | None = None) -> pa.Table:
    """`entries` with hashed and left-out values removed from `raw` for objects with `redact_quarantine`;
    `redact`: whether any replicated object redacts (lines that name no object are then redacted whole), when
    `schemas` holds only some of them."""
    if not (any(s.redact_quarantine for s in schemas.values()) if redact is None else redact):
        return entries
    raw = pa.array(
        [_redact_line(r, schemas) if r is not None else None for r in entries["raw"].to_pylist()], pa.string()
    )
    return entries.set_column(entries.schema.get_field_index("raw"), "raw", raw)


def record_quarantine(
    warehouse: DeltaWarehouse,
    entries: pa.Table,
    *,
    run_id: str,
    now: datetime,
    key: str,
    schemas: Mapping[str, ObjectSchema],
    consequence: str = "line quarantined",
    redact: bool | None = None,
) -> None:
    """Insert `entries` (`source_file, source_line, raw, reason`) stamped with the run and time, and log them;
    `key`: who quarantines (`Q_STATE`, `Q_APPLY_STATE` in replication/state.py); `schemas`: the replicated
    objects, whose `redact_quarantine` says whether their lines are redacted."""
    if not entries.num_rows:
        return
    entries = redacted(entries, schemas, redact)
    n = entries.num_rows
    stamped = entries.append_column("run_id", pa.repeat(pa.scalar(run_id, pa.string()), n)).append_column(
        "quarantined_at", pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), n)
    )
    warehouse.insert_missing(
        QUARANTINE,
        stamped,
        keys=["source_file", "source_line"],
        key=key,
        state=QuarantineState(run_id=run_id).to_dict(),
    )
    for r in entries.slice(0, LOGGED).to_pylist():
        log.warning("Landing file %s; %s", quarantine_example(r), consequence)


def acknowledged_until(warehouse: DeltaWarehouse, table: DeltaTable) -> datetime | None:
    """The newest acknowledgement, read from its app transaction (it survives log checkpoints and log retention,
    which the commit metadata beside it does not); None if nothing was acknowledged."""
    micros = table.transaction_version(QUARANTINE_ACK)
    return EPOCH + timedelta(microseconds=micros) if micros is not None else None


def acknowledge_quarantine(warehouse: DeltaWarehouse, until: datetime) -> int | None:
    """Mark every quarantined line with `quarantined_at` <= `until` as reviewed; `quarantine_empty` passes again.

    Writes an empty append commit to `_quarantine` carrying the timestamp (commit metadata `cdc.quarantine_ack`
    and the app transaction of that name, in microseconds). Returns the new version, or None if nothing was ever
    quarantined.
    """
    if until.tzinfo is None:
        raise ValueError("acknowledge_quarantine: `until` must be timezone-aware, e.g. datetime.now(timezone.utc)")
    table = warehouse.table(QUARANTINE)
    if table is None:
        return None
    until = until.astimezone(UTC)
    empty = pa.schema(table.schema().to_arrow()).empty_table()
    micros = (until - EPOCH) // timedelta(microseconds=1)
    ack = QuarantineAck(until=until.isoformat())
    return warehouse.append(
        QUARANTINE,
        empty,
        read=table,
        partition_by=None,
        key=ack.KEY,
        state=ack.to_dict(),
        txns={QUARANTINE_ACK: micros},
    ).version()


def newest_quarantined_at(warehouse: DeltaWarehouse) -> datetime | None:
    """When the newest line was quarantined (None: nothing ever was): what an acknowledgement of everything names."""
    table = warehouse.table(QUARANTINE)
    if table is None:
        return None
    rows = warehouse.read(table, columns=["quarantined_at"])
    return pc.max(rows["quarantined_at"]).as_py() if rows.num_rows else None
