"""Replica Change Data Feed rows -> changefeed records (pure pyarrow + json; no I/O). Used by cdc_assets/changefeed/export.py.

**What a change is.** A consumer sees the replica's *live rows* (`_sf_deleted` not true) and their *data columns*:
the describe() fields, `Id` first. The system columns are bookkeeping and never make a change on their own:
`_sf_synced_at` (when written), `_sf_commit_ts`, `_sf_replay_id`, `_sf_commit_number`, `_sf_sequence_number` (the
row's position: they travel in the Debezium `source` block instead), `_sf_source`, `_sf_dirty_since` (a record
awaiting reconcile is still the row it was), `_sf_deleted_at` and `_sf_bucket` (derived). `_sf_deleted` is not a
column of the image either: it decides the operation. The feed mirrors the replica as it is: a gap event for a
record the replica never saw makes a placeholder row (fields null, dirty), which the feed shows as a create, then
as an update once a reconcile fills it.

**Netting.** Every replica version is netted by `Id`: the row before it is the CDF `update_preimage` or `delete`
row, the row after it the `update_postimage` or `insert` row. A merge yields pre/post pairs; an overwrite (resync,
initial load) yields delete-every-row + insert-every-row, which the same netting turns into just the difference
it made. Then, per (version, Id):

| before \\ after  | absent or deleted | live, same data | live, data differs |
|-----------------|-------------------|-----------------|--------------------|
| absent/deleted  | nothing           | create (`c`)    | create (`c`)       |
| live            | erase (`d`)       | nothing         | update (`u`)       |

so a soft delete is an erase, an undelete a create, and an update that changes only bookkeeping is not emitted.

**Records.** `render` turns a netted change, stamped by replication/changefeed/clock.py (`ts`, `txid`), into YDB
JSON (`key`, `update`/`erase`, `newImage`/`oldImage` as the mode has them, `ts`) or into Debezium JSON: the Kafka
record's `key` and `value` (Debezium's envelope: whole `before` and `after`, `source`, `op`, `ts_ms`,
`transaction`), followed after a delete by Debezium's tombstone (`value` null). `resolved` is YDB's resolved line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from functools import cache

import pyarrow as pa
import pyarrow.compute as pc

from object_schema.describe import FORMULAS_AT, SYSTEM_COLUMNS

KEY = "Id"
# Columns that never make a change on their own: the system columns, and when formula values were read (a refresh
# that finds them as they were changes nothing a consumer sees).
BOOKKEEPING = frozenset({*(name for name, _ in SYSTEM_COLUMNS), FORMULAS_AT})
CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
PRE_TYPES, POST_TYPES = ("update_preimage", "delete"), ("update_postimage", "insert")
SOURCE_COLUMNS = {
    "_sf_commit_ts": "commit_ts",
    "_sf_replay_id": "replay_id",
    "_sf_commit_number": "commit_number",
    "_sf_sequence_number": "sequence_number",
    "_sf_source": "origin",
}
CONNECTOR, CONNECTOR_VERSION, DB = "salesforce-delta", "2", "salesforce"  # DB: source.db (the org)
CREATE, UPDATE, ERASE, READ = "c", "u", "d", "r"
NEW_MODES, OLD_MODES = {"NEW_IMAGE", "NEW_AND_OLD_IMAGES"}, {"OLD_IMAGE", "NEW_AND_OLD_IMAGES"}
PYTHON_ROWS = 1_000  # rows turned into Python dicts at a time (a batch's worth would pin tens of MB of small objects)


def plain(table: pa.Table) -> pa.Table:
    """View and large string types (as delta-rs may hand them out) cast to plain strings: joins take those."""
    fields = [
        pa.field(f.name, pa.string()) if f.type in (pa.string_view(), pa.large_string()) else f for f in table.schema
    ]
    return table.cast(pa.schema(fields))


def as_json_types(table: pa.Table) -> pa.Table:
    """Data columns of date and timestamp type as the ISO strings the feed writes (`json_value`'s format), once per
    column in Arrow rather than once per value in Python."""
    for i, f in enumerate(table.schema):
        if f.name in BOOKKEEPING or f.name in CDF_COLUMNS:
            continue
        if pa.types.is_timestamp(f.type):
            text = pc.strftime(table[f.name], format="%Y-%m-%dT%H:%M:%SZ", locale="C")
        elif pa.types.is_date(f.type):
            text = pc.strftime(table[f.name], format="%Y-%m-%d", locale="C")
        else:
            continue
        table = table.set_column(i, f.name, text)
    return table


def data_columns(schema: pa.Schema) -> list[str]:
    names = [n for n in schema.names if n not in BOOKKEEPING and n not in CDF_COLUMNS]
    return [KEY] + [n for n in names if n != KEY]


def _live(table: pa.Table, present: str, suffix: str) -> pa.ChunkedArray:
    deleted = pc.fill_null(table[f"_sf_deleted{suffix}"], False)
    return pc.and_(pc.fill_null(table[present], False), pc.invert(deleted))


def _differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> pa.ChunkedArray:
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    return pc.invert(same)


def net_changes(cdf: pa.Table) -> pa.Table:
    """CDF rows of a range of versions -> one row per (version, Id) that a consumer must see, in (version, Id)
    order: `op` (c/u/d), `version`, and each column twice, `<col>__pre` and `<col>__post`."""
    cdf = as_json_types(plain(cdf))
    columns = [n for n in cdf.schema.names if n not in CDF_COLUMNS]
    kind = cdf["_change_type"]
    pre = cdf.filter(pc.is_in(kind, pa.array(PRE_TYPES))).select([*columns, "_commit_version"])
    post = cdf.filter(pc.is_in(kind, pa.array(POST_TYPES))).select([*columns, "_commit_version"])
    pre = pre.append_column("_present__pre", pa.repeat(True, pre.num_rows))
    post = post.append_column("_present__post", pa.repeat(True, post.num_rows))
    both = pre.join(
        post,
        keys=[KEY, "_commit_version"],
        join_type="full outer",
        left_suffix="__pre",
        right_suffix="__post",
        coalesce_keys=True,
    )
    live_pre = _live(both, "_present__pre", "__pre")
    live_post = _live(both, "_present__post", "__post")
    differs = pa.repeat(False, both.num_rows)
    for name in data_columns(cdf.schema)[1:]:
        differs = pc.or_(differs, _differs(both[f"{name}__pre"], both[f"{name}__post"]))
    op = pc.case_when(
        pc.make_struct(
            pc.and_(pc.invert(live_pre), live_post),
            pc.and_(live_pre, pc.invert(live_post)),
            pc.and_(pc.and_(live_pre, live_post), differs),
        ),
        pa.scalar(CREATE),
        pa.scalar(ERASE),
        pa.scalar(UPDATE),
    )
    both = both.rename_columns([{"_commit_version": "version"}.get(n, n) for n in both.schema.names])
    both = both.append_column("op", op)
    both = both.filter(pc.is_valid(both["op"]))
    return both.sort_by([("version", "ascending"), (KEY, "ascending")])


def json_value(value):
    """A column value as JSON: timestamps ISO-8601 UTC with microseconds and `Z`, dates `YYYY-MM-DD`."""
    if isinstance(value, datetime):
        value = value.astimezone(UTC) if value.tzinfo else value
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    return value


@cache
def _suffixed(columns: tuple[str, ...], suffix: str) -> tuple[tuple[str, str], ...]:
    return tuple((c, f"{c}{suffix}") for c in columns if c != KEY)


def _image(row: dict, columns: list[str], suffix: str) -> dict:
    """The row's data columns (values already JSON types: `as_json_types`)."""
    return {KEY: row[KEY], **{c: row.get(key) for c, key in _suffixed(tuple(columns), suffix)}}


def _source(row: dict, suffix: str, *, name: str, table: str, snapshot: str) -> dict:
    """Debezium's `source` block: the fields every connector has (version, connector, name, ts_ms, snapshot, db,
    sequence, table), `txId`, then this connector's own (the row's Salesforce position and the Delta version)."""
    ts = row.get(f"_sf_commit_ts{suffix}")
    source = {
        "version": CONNECTOR_VERSION,
        "connector": CONNECTOR,
        "name": name,
        "ts_ms": int(ts.timestamp() * 1000) if ts is not None else None,
        "snapshot": snapshot,
        "db": DB,
        "sequence": json.dumps(row["ts"], separators=(",", ":")),
        "table": table,
        "txId": row.get("txid"),
    }
    for column, key in SOURCE_COLUMNS.items():
        source[key] = json_value(row.get(f"{column}{suffix}"))
    return source


def render(change: dict, columns: list[str], *, mode: str, fmt: str, name: str, table: str) -> list[dict]:
    """One netted change (a row of `net_changes` plus its `ts`, `commit_ms` and `txid`, or a snapshot row with op
    `r`) as the feed records it makes in `fmt` (json: YDB, one record; debezium_json: the Kafka record's key and
    value, and after an erase Debezium's tombstone) and `mode`."""
    op, key = change["op"], change[KEY]
    new = _image(change, columns, "__post") if op != ERASE else None
    old = _image(change, columns, "__pre") if op in (UPDATE, ERASE) else None
    if fmt == "json":
        return [_ydb(change, mode, new, old)]
    suffix = "__pre" if op == ERASE and change.get("_present__post") is None else "__post"
    snapshot = ("last" if change.get("last") else "true") if op == READ else "false"
    value = {
        "before": old,
        "after": new,
        "source": {
            **_source(change, suffix, name=name, table=table, snapshot=snapshot),
            "delta_version": change["version"],
            "delta_commit_ms": change["commit_ms"],
        },
        "op": op,
        "ts_ms": change["commit_ms"],
        "transaction": None,
    }
    records: list[dict] = [{"key": {KEY: key}, "value": value}]
    if op == ERASE:
        records.append({"key": {KEY: key}, "value": None})  # the tombstone (Debezium's tombstones.on.delete)
    return records


def _ydb(change: dict, mode: str, new: dict | None, old: dict | None) -> dict:
    """A YDB JSON record: `key`, `update` (the changed columns in UPDATES, else {}) or `erase`, the images the
    mode has, `ts`."""
    record: dict = {"key": [change[KEY]]}
    if change["op"] == ERASE:
        record["erase"] = {}
    elif mode == "UPDATES":
        assert new is not None, "every change but an erase has its new image"
        changed = new if old is None else {c: v for c, v in new.items() if v != old.get(c)}
        record["update"] = {c: v for c, v in changed.items() if c != KEY}
    else:
        record["update"] = {}
    if mode in NEW_MODES and new is not None:
        record["newImage"] = {c: v for c, v in new.items() if c != KEY}
    if mode in OLD_MODES and old is not None:
        record["oldImage"] = {c: v for c, v in old.items() if c != KEY}
    record["ts"] = change["ts"]
    return record


def snapshot_changes(rows: pa.Table, *, version: int, commit_ms: int, ts: list[int]) -> Iterator[dict]:
    """Live rows of one batch of the snapshot at `version`, in Id order, as `r` changes (the initial scan); they
    carry no transaction (a snapshot read is none) and the ts of the snapshot."""
    rows = as_json_types(plain(rows))
    live = rows.filter(pc.invert(pc.fill_null(rows["_sf_deleted"], False))).sort_by(KEY)
    for row in (row for chunk in live.to_batches(max_chunksize=PYTHON_ROWS) for row in chunk.to_pylist()):
        yield {
            "op": READ,
            "version": version,
            "commit_ms": commit_ms,
            "ts": ts,
            "txid": None,
            KEY: row[KEY],
            **{f"{c}__post": v for c, v in row.items()},
        }


def line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=False) + "\n"


def resolved(step: int) -> dict:
    """A YDB resolved line: every change whose `ts` step is <= `step` has been emitted before it."""
    return {"resolved": [step, 0]}
