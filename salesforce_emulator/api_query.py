"""SOQL over REST (``query``, ``queryAll``, ``nextRecordsUrl`` paging) and the sObject Collections retrieve.

A query runs once, at its first call, and its result is kept server-side as a cursor; ``nextRecordsUrl`` pages
through that cursor, so pages are a consistent result even while the org changes (as in Salesforce).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from salesforce_emulator import ids, soql
from salesforce_emulator.api_rest import render_record, resolve_fields
from salesforce_emulator.errors import ApiError
from salesforce_emulator.schema import Field, SObject
from salesforce_emulator.server import Request, Response, route

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

DEFAULT_BATCH = 2000
MAX_RETRIEVE_IDS = 2000
_cursor_counter = iter(range(1, 1 << 62))


@dataclass
class Cursor:
    obj: SObject
    fields: list[Field]
    rows: list[dict[str, Any]]
    batch: int


def _batch_size(req: Request) -> int:
    options = req.headers.get("sforce-query-options", "")
    for part in options.split(","):
        key, _, value = part.strip().partition("=")
        if key.lower() == "batchsize" and value.isdigit():
            return max(200, min(int(value), DEFAULT_BATCH))
    return DEFAULT_BATCH


def _page(api: Api, req: Request, cursor_id: str, cursor: Cursor, start: int) -> Response:
    end = min(start + cursor.batch, len(cursor.rows))
    records = [
        render_record(cursor.obj, row, cursor.fields, req.version, api.store.related) for row in cursor.rows[start:end]
    ]
    body: dict[str, Any] = {"totalSize": len(cursor.rows), "done": end >= len(cursor.rows), "records": records}
    if end < len(cursor.rows):
        body["nextRecordsUrl"] = f"/services/data/v{req.version}/query/{cursor_id}-{end}"
    else:
        with api.lock:
            api.cursors.pop(cursor_id, None)
    return Response(body=body)


def run_query(api: Api, req: Request, include_deleted: bool) -> Response:
    text = req.arg("q")
    if not text:
        raise ApiError(400, "MALFORMED_QUERY", "A query string (parameter q) is required")
    query = soql.parse(text, api.finder(req))
    sql, params = query.sql(include_deleted)
    if query.count_only:
        count_sql = sql.replace("SELECT *", "SELECT COUNT(*) AS n", 1)
        return Response(body={"totalSize": api.store.select(count_sql, params)[0]["n"], "done": True, "records": []})
    rows = api.store.select(sql, params)
    cursor_id = ids.make_id("01g", next(_cursor_counter))
    cursor = Cursor(query.obj, query.fields, rows, _batch_size(req))
    api.remember_cursor(cursor_id, cursor)
    return _page(api, req, cursor_id, cursor, 0)


def query(api: Api, req: Request) -> Response:
    return run_query(api, req, include_deleted=False)


def query_all(api: Api, req: Request) -> Response:
    return run_query(api, req, include_deleted=True)


def query_more(api: Api, req: Request) -> Response:
    cursor_id, _, start = req.params["locator"].rpartition("-")
    cursor = api.cursors.get(cursor_id)
    if cursor is None or not start.isdigit():
        raise ApiError(400, "INVALID_QUERY_LOCATOR", "invalid query locator")
    return _page(api, req, cursor_id, cursor, int(start))


def _retrieve_id(record_id: object) -> str:
    """A Collections retrieve's id in its 18-character form. One that is not 15 or 18 letters and digits, or whose
    case-safe suffix does not match its first 15 characters, fails the whole call with ``MALFORMED_ID`` naming it,
    as Salesforce answers (an id that is well formed but names no record is ``null`` instead)."""
    valid = isinstance(record_id, str) and len(record_id) in (15, 18) and record_id.isascii() and record_id.isalnum()
    if not valid or (len(record_id) == 18 and record_id[15:].upper() != ids.case_safe_suffix(record_id[:15])):
        raise ApiError(400, "MALFORMED_ID", f"malformed id {record_id}")
    return ids.to_18(record_id[:15])  # the suffix is case-insensitive: the first 15 characters say it all


def composite_retrieve(api: Api, req: Request) -> Response:
    """``POST composite/sobjects/<Object>`` with ``{"ids": [...], "fields": [...]}``: one entry per id, in order,
    ``null`` where the id is unknown or deleted; a malformed id fails the call (``_retrieve_id``)."""
    obj = api.resolve(req, req.params["object"])
    if req.method == "GET":
        record_ids = (req.arg("ids") or "").split(",")
        names = (req.arg("fields") or "").split(",")
    else:
        body = req.json() or {}
        record_ids, names = body.get("ids") or [], body.get("fields") or []
    if not record_ids or not names or record_ids == [""] or names == [""]:
        raise ApiError(400, "INVALID_FIELD", "Both ids and fields are required")
    if len(record_ids) > MAX_RETRIEVE_IDS:
        raise ApiError(
            400, "EXCEEDED_ID_LIMIT", f"The number of ids ({len(record_ids)}) exceeds the limit of {MAX_RETRIEVE_IDS}"
        )
    fields = resolve_fields(obj, names)
    wanted = [_retrieve_id(r) for r in record_ids]
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        for row in api.store.select(f'SELECT * FROM "{obj.name}" WHERE Id IN ({marks}) AND IsDeleted = 0', chunk):
            found[row["Id"]] = row
    return Response(
        body=[
            render_record(obj, found[i], fields, req.version, api.store.related) if i in found else None for i in wanted
        ]
    )


ROUTES = [
    route("GET", "/query", "query", query),
    route("GET", "/queryAll", "query", query_all),
    route("GET", r"/(?:query|queryAll)/(?P<locator>[\w]+-\d+)", "query_more", query_more),
    route("POST", r"/composite/sobjects/(?P<object>\w+)", "composite_retrieve", composite_retrieve),
    route("GET", r"/composite/sobjects/(?P<object>\w+)", "composite_retrieve", composite_retrieve),
]
