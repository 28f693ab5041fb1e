"""Writes of many records in one transaction: sObject Collections (``composite/sobjects``) and ``composite``.

Each call is one database transaction, so its changes share one ``transactionKey`` in the CDC stream; the same
change applied to consecutive records becomes one event naming all of them. ``allOrNone`` is honoured with
savepoints: a failing record rolls back alone, or (allOrNone) the whole call rolls back and the other records
report ``ALL_OR_NONE_OPERATION_ROLLED_BACK``, as in Salesforce. Each record is checked as a single write checks it
(``api_rest.check_write``): a field the caller cannot read is ``INVALID_FIELD``, permission records are the admin's;
composite subrequests run as the caller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from salesforce_emulator.api_rest import check_write
from salesforce_emulator.changes import Transaction, normalize_id
from salesforce_emulator.errors import ApiError
from salesforce_emulator.schema import BY_PREFIX
from salesforce_emulator.server import Request, Response, route

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

MAX_RECORDS = 200
MAX_SUBREQUESTS = 25
_REFERENCE = re.compile(r"@\{(\w+)\.(\w+)\}")


class _RollBack(Exception):
    """Raised inside the transaction to undo an allOrNone call after recording per-record results."""


class _SubrequestFailed(Exception):
    def __init__(self, response: Response):
        super().__init__(response.status)
        self.response = response


def _error(exc: ApiError) -> dict[str, Any]:
    return {"statusCode": exc.error_code, "message": exc.message, "fields": exc.fields or []}


def _run_records(
    api: Api, req: Request, items: list[Any], all_or_none: bool, apply: Callable[[Transaction, Any], str]
) -> Response:
    if len(items) > MAX_RECORDS:
        raise ApiError(400, "EXCEEDED_ID_LIMIT", f"record limit exceeded: at most {MAX_RECORDS} records per call")
    results: list[dict[str, Any]] = []
    try:
        with api.store.transaction(req.user_id or None, origin=req.origin) as txn:
            for item in items:
                try:
                    with txn.savepoint():
                        record_id = apply(txn, item)
                    results.append({"id": record_id, "success": True, "errors": []})
                except ApiError as exc:
                    results.append({"success": False, "errors": [_error(exc)]})
            if all_or_none and any(not r["success"] for r in results):
                raise _RollBack
    except _RollBack:
        rolled = {
            "statusCode": "ALL_OR_NONE_OPERATION_ROLLED_BACK",
            "message": "Record rolled back because not "
            "all records were valid and the request was using AllOrNone header",
            "fields": [],
        }
        results = [r if not r["success"] else {"id": r["id"], "success": False, "errors": [rolled]} for r in results]
    return Response(body=results)


def _body(req: Request) -> tuple[list[Any], bool]:
    body = req.json()
    if not isinstance(body, dict) or not isinstance(body.get("records"), list):
        raise ApiError(400, "JSON_PARSER_ERROR", 'Expected {"allOrNone": bool, "records": [...]}')
    return body["records"], bool(body.get("allOrNone", False))


def _type_of(record: dict[str, Any]) -> str:
    kind = (record.get("attributes") or {}).get("type")
    if not kind:
        raise ApiError(400, "INVALID_TYPE", "Each record needs attributes.type")
    return kind


def collection_create(api: Api, req: Request) -> Response:
    records, all_or_none = _body(req)

    def apply(txn: Transaction, record: dict[str, Any]) -> str:
        fields = {k: v for k, v in record.items() if k != "attributes"}
        check_write(api, req, api.store.resolve(_type_of(record)), fields, None)
        return txn.create(_type_of(record), fields)

    return _run_records(api, req, records, all_or_none, apply)


def collection_update(api: Api, req: Request) -> Response:
    records, all_or_none = _body(req)

    def apply(txn: Transaction, record: dict[str, Any]) -> str:
        record_id = normalize_id(record.get("id") or record.get("Id") or "")
        fields = {k: v for k, v in record.items() if k not in ("attributes", "id", "Id")}
        obj = api.store.resolve(_type_of(record))
        check_write(api, req, obj, fields, txn.get(obj.name, record_id))
        txn.update(obj.name, record_id, fields)
        return record_id

    return _run_records(api, req, records, all_or_none, apply)


def collection_delete(api: Api, req: Request) -> Response:
    record_ids = [i for i in (req.arg("ids") or "").split(",") if i]
    all_or_none = (req.arg("allOrNone") or "false").lower() == "true"

    def apply(txn: Transaction, record_id: str) -> str:
        record_id = normalize_id(record_id)
        obj = BY_PREFIX.get(record_id[:3])
        if obj is None:
            raise ApiError(400, "MALFORMED_ID", f"Unknown key prefix in id {record_id}")
        txn.delete(obj.name, [record_id])
        return record_id

    return _run_records(api, req, record_ids, all_or_none, apply)


def _substitute(value: Any, results: dict[str, Any]) -> Any:
    text = json.dumps(value)

    def lookup(match: re.Match[str]) -> str:
        ref, key = match.groups()
        body = results.get(ref)
        if not isinstance(body, dict) or key not in body:
            raise ApiError(400, "INVALID_REFERENCE", f"Reference @{{{ref}.{key}}} cannot be resolved")
        return str(body[key])

    return json.loads(_REFERENCE.sub(lookup, text))


def composite(api: Api, req: Request) -> Response:
    """``POST composite``: up to 25 subrequests in one transaction, later ones may use ``@{ref.id}``."""
    body = req.json() or {}
    subrequests = body.get("compositeRequest") or []
    if not subrequests or len(subrequests) > MAX_SUBREQUESTS:
        raise ApiError(400, "INVALID_BATCH_REQUEST", f"compositeRequest needs 1 to {MAX_SUBREQUESTS} subrequests")
    all_or_none = bool(body.get("allOrNone", False))
    outputs: list[dict[str, Any]] = []
    bodies: dict[str, Any] = {}
    try:
        with api.store.transaction(req.user_id or None, origin=req.origin) as txn:
            failed = False
            for sub in subrequests:
                ref = sub.get("referenceId", "")
                if failed and all_or_none:
                    outputs.append(
                        {
                            "body": [
                                {
                                    "errorCode": "PROCESSING_HALTED",
                                    "message": "The transaction was "
                                    "rolled back since another operation in the same transaction failed.",
                                }
                            ],
                            "httpHeaders": {},
                            "httpStatusCode": 400,
                            "referenceId": ref,
                        }
                    )
                    continue
                try:
                    url = _substitute(sub.get("url", ""), bodies)
                    payload = _substitute(sub.get("body"), bodies) if sub.get("body") is not None else None
                except ApiError as exc:
                    response = Response(exc.status, exc.body())
                else:
                    parts = urlsplit(url)
                    inner = Request(
                        sub.get("method", "GET").upper(),
                        parts.path,
                        parse_qs(parts.query),
                        req.headers,
                        json.dumps(payload).encode() if payload is not None else b"",
                    )
                    inner.user_id = req.user_id  # the caller's session: its field-level security, its name
                    try:
                        with txn.savepoint():
                            response = api.dispatcher.handle(inner, nested=True)
                            if response.status >= 400:
                                raise _SubrequestFailed(response)
                    except _SubrequestFailed as failure:
                        response = failure.response
                    else:
                        bodies[ref] = response.body
                outputs.append(
                    {"body": response.body, "httpHeaders": {}, "httpStatusCode": response.status, "referenceId": ref}
                )
                failed = failed or response.status >= 400
            if failed and all_or_none:
                raise _RollBack
    except _RollBack:
        pass
    return Response(body={"compositeResponse": outputs})


ROUTES = [
    route("POST", "/composite/sobjects", "composite_collection", collection_create),
    route("PATCH", "/composite/sobjects", "composite_collection", collection_update),
    route("DELETE", "/composite/sobjects", "composite_collection", collection_delete),
    route("POST", "/composite", "composite", composite),
]
