"""The check `table_protocol`: every table the platform writes keeps a Delta protocol its readers can read.

Run with each replica's checks (over the replica and, with `history: true`, its history table) and with
change_events' (over `_change_events` and `_quarantine`). It passes while each existing table's protocol is inside
the allow-list of resources/delta_protocol.py (reader version 1 without reader features; writer version 2-4, or 7
with legacy writer features only; not append-only) and fails, naming the table, what it now requires and what to
do, as soon as someone else turned a feature on. The writers refuse such a table on their own
(`ensure_supported`): this check is where the UI shows it, also for a table no run has written since.
"""

from __future__ import annotations

import dagster as dg
from deltalake import DeltaTable

from resources.delta_protocol import READER_VERSION, WRITER_FEATURES, Protocol, unsupported_message

TABLE_PROTOCOL = "table_protocol"
DESCRIPTION = (
    "The table's Delta protocol stays inside the allow-list DuckDB, polars, Spark and Trino read and delta-rs writes "
    "(reader version 1, no reader features; writer version 2-4, or 7 with appendOnly, invariants, checkConstraints, "
    "changeDataFeed, generatedColumns; not append-only): no one turned on deletion vectors, column mapping, row "
    "tracking, domain metadata, type widening, ..."
)


def check_table_protocol(tables: dict[str, DeltaTable | None]) -> dg.AssetCheckResult:
    """The protocol of each table of `tables` (name -> its snapshot, None: not made yet), against the allow-list."""
    found: dict[str, str] = {}
    refused: list[str] = []
    for name, table in tables.items():
        if table is None:
            continue
        protocol = Protocol.of(table)
        found[name] = protocol.describe()
        if problems := protocol.problems():
            refused.append(unsupported_message(name, protocol, problems))
    metadata: dict[str, dg.MetadataValue] = {
        "protocols": dg.MetadataValue.json(found),
        "allowed": dg.MetadataValue.json(
            {"minReaderVersion": READER_VERSION, "readerFeatures": [], "writerFeatures": sorted(WRITER_FEATURES)}
        ),
        "tables_refused": dg.MetadataValue.int(len(refused)),
    }
    if not found:
        description = f"No table yet ({', '.join(tables)}): nothing to check."
    elif not refused:
        description = "; ".join(f"{n}: {p}" for n, p in found.items()) + ": inside the allow-list."
    else:
        description = " ".join(refused)
    return dg.AssetCheckResult(
        check_name=TABLE_PROTOCOL, passed=not refused, metadata=metadata, description=description
    )
