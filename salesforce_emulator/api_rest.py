"""REST endpoints on single records and metadata: versions, sobjects, describe, CRUD, undelete, limits, blobs (OAuth:
api_oauth.py).

``POST .../sobjects/<Object>/<Id>/undelete`` and ``DELETE .../sobjects/<Object>/<Id>/recycleBin`` are emulator
extensions (Salesforce exposes undelete and emptying the recycle bin through SOAP and Apex only); they are how
tests and the workload reach those operations over HTTP.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from salesforce_emulator.changes import normalize_id
from salesforce_emulator.errors import ApiError, invalid_field, not_found
from salesforce_emulator.org_setup import PERMISSION_OBJECTS, insufficient_access
from salesforce_emulator.schema import Field, Related, SObject, derived_value
from salesforce_emulator.server import Request, Response, route
from salesforce_emulator.values import to_rest

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

RELEASES = [("Winter '24", "59.0"), ("Spring '24", "60.0"), ("Summer '24", "61.0"), ("Winter '25", "62.0")]


def render_record(
    obj: SObject, row: dict[str, Any], fields: list[Field], version: str, related: Related
) -> dict[str, Any]:
    """A record in REST JSON form: ``attributes`` first, then the requested fields in order (`related`: the
    records cross-object formulas read)."""
    out: dict[str, Any] = {
        "attributes": {"type": obj.name, "url": f"/services/data/v{version}/sobjects/{obj.name}/{row['Id']}"}
    }
    for fld in fields:
        value = row.get(fld.name) if fld.stored else derived_value(obj, fld, row, related)
        out[fld.name] = to_rest(fld.type, value) if fld.stored or fld.calculated else value
        if fld.type == "base64" and value is not None:  # the blob's URL, never its bytes (`blob`)
            out[fld.name] = f"/services/data/v{version}/sobjects/{obj.name}/{row['Id']}/{fld.name}"
    return out


def resolve_fields(obj: SObject, names: list[str]) -> list[Field]:
    fields = []
    for name in names:
        fld = obj.field(name.strip())
        if fld is None:
            raise invalid_field(f"No such column '{name.strip()}' on entity '{obj.name}'", [name.strip()])
        fields.append(fld)
    return fields


def versions(api: Api, req: Request) -> Response:
    return Response(body=[{"label": label, "url": f"/services/data/v{v}", "version": v} for label, v in RELEASES])


def sobjects(api: Api, req: Request) -> Response:
    entries = [
        {
            "name": o.name,
            "label": o.name,
            "keyPrefix": o.key_prefix,
            "custom": o.custom,
            "queryable": True,
            "createable": True,
            "updateable": True,
            "deletable": o.deletable,
            "replicateable": True,
            "urls": {
                "sobject": f"/services/data/v{req.version}/sobjects/{o.name}",
                "describe": f"/services/data/v{req.version}/sobjects/{o.name}/describe",
            },
        }
        for o in api.store.objects
    ]
    return Response(body={"encoding": "UTF-8", "maxBatchSize": 200, "sobjects": entries})


def describe(api: Api, req: Request) -> Response:
    return Response(body=api.store.describe(req.params["object"], req.version, req.user_id or None))


def sobject_info(api: Api, req: Request) -> Response:
    obj = api.resolve(req, req.params["object"])
    recent = api.store.select(f'SELECT * FROM "{obj.name}" WHERE IsDeleted = 0 ORDER BY Id DESC LIMIT 3')
    short = [f for f in obj.fields if f.name in ("Id", "Name")]
    return Response(
        body={
            "objectDescribe": {"name": obj.name, "keyPrefix": obj.key_prefix},
            "recentItems": [render_record(obj, r, short, req.version, api.store.related) for r in recent],
        }
    )


def check_write(api: Api, req: Request, obj: SObject, body: dict[str, Any], current: dict[str, Any] | None) -> None:
    """What the org checks before a write besides the values themselves: a field the user cannot read is no
    column of theirs, and only an admin changes permission records (org_setup.py)."""
    seen = api.resolve(req, obj.name)
    for name in body:
        if name != "attributes" and seen.field(name) is None and obj.field(name) is not None:
            raise invalid_field(f"No such column '{name}' on sobject of type {obj.name}", [name])
    if obj.name in PERMISSION_OBJECTS:
        if not api.is_admin(req):
            raise insufficient_access(f"changing {obj.name} records")
        api.store.setup.check_permission_write(obj, body, current)


def create(api: Api, req: Request) -> Response:
    obj = api.store.resolve(req.params["object"])
    body = req.json()
    if not isinstance(body, dict):
        raise ApiError(400, "JSON_PARSER_ERROR", "Expected a JSON object with the record's fields")
    check_write(api, req, obj, body, None)
    with api.store.transaction(req.user_id or None, origin=req.origin) as txn:
        record_id = txn.create(obj.name, body)
    return Response(201, {"id": record_id, "success": True, "errors": []})


def get(api: Api, req: Request) -> Response:
    obj = api.resolve(req, req.params["object"])
    row = api.store.get_row(obj.name, normalize_id(req.params["id"]))
    if row is None or row["IsDeleted"]:
        raise not_found()
    names = req.arg("fields")
    fields = resolve_fields(obj, names.split(",")) if names else list(obj.fields)
    return Response(body=render_record(obj, row, fields, req.version, api.store.related))


def blob(api: Api, req: Request) -> Response:
    """sObject Blob Get (``GET .../sobjects/<Object>/<Id>/<blobField>``): the bytes of a base64 field, as binary
    data, the URL a REST read gives for it."""
    obj = api.resolve(req, req.params["object"])
    fld = obj.field(req.params["field"])
    row = api.store.get_row(obj.name, normalize_id(req.params["id"]))
    if fld is None or fld.type != "base64" or row is None or row.get("IsDeleted") or row.get(fld.name) is None:
        raise not_found()
    return Response(body=base64.b64decode(row[fld.name]), content_type="application/octetstream")


def update(api: Api, req: Request) -> Response:
    obj = api.store.resolve(req.params["object"])
    body = req.json()
    if not isinstance(body, dict):
        raise ApiError(400, "JSON_PARSER_ERROR", "Expected a JSON object with the fields to update")
    current = api.store.get_row(obj.name, normalize_id(req.params["id"]))
    check_write(api, req, obj, body, current)
    with api.store.transaction(req.user_id or None, origin=req.origin) as txn:
        txn.update(obj.name, req.params["id"], body)
        after = txn.get(obj.name, normalize_id(req.params["id"])) or {}
        if obj.name == "FieldPermissions" and not after.get("PermissionsRead") and not after.get("PermissionsEdit"):
            # "A FieldPermissions record must have at minimum PermissionsRead set to true, or it will be deleted."
            txn.delete(obj.name, [req.params["id"]])
    return Response(204)


def delete(api: Api, req: Request) -> Response:
    obj = api.store.resolve(req.params["object"])
    if obj.name in PERMISSION_OBJECTS and not api.is_admin(req):
        raise insufficient_access(f"deleting {obj.name} records")
    with api.store.transaction(req.user_id or None, origin=req.origin) as txn:
        txn.delete(obj.name, [req.params["id"]])
    return Response(204)


def undelete(api: Api, req: Request) -> Response:
    obj = api.store.resolve(req.params["object"])
    with api.store.transaction(origin=req.origin) as txn:
        txn.undelete(obj.name, [req.params["id"]])
    return Response(200, {"id": normalize_id(req.params["id"]), "success": True, "errors": []})


def empty_recycle_bin(api: Api, req: Request) -> Response:
    obj = api.store.resolve(req.params["object"])
    with api.store.transaction(origin=req.origin) as txn:
        txn.purge(obj.name, [req.params["id"]])
    return Response(204)


def limits(api: Api, req: Request) -> Response:
    limit = api.daily_request_limit
    return Response(
        body={
            "DailyApiRequests": {"Max": limit, "Remaining": max(limit - api.budget_used, 0)},
            "DailyBulkV2QueryJobs": {"Max": 10000, "Remaining": 10000 - len(api.jobs)},
            "DailyBulkV2QueryFileStorageMB": {"Max": 976562, "Remaining": 976562},
        }
    )


_OBJ = r"/sobjects/(?P<object>\w+)"
ROUTES = [
    route("GET", "/services/data", "versions", versions, auth=False, data=False),
    route("GET", "/limits", "limits", limits),
    route("GET", "/sobjects", "sobjects", sobjects),
    route("GET", _OBJ + "/describe", "describe", describe),
    route("GET", _OBJ, "sobject_info", sobject_info),
    route("POST", _OBJ, "create", create),
    route("POST", _OBJ + r"/(?P<id>\w+)/undelete", "undelete", undelete),
    route("DELETE", _OBJ + r"/(?P<id>\w+)/recycleBin", "empty_recycle_bin", empty_recycle_bin),
    route("GET", _OBJ + r"/(?P<id>\w+)", "retrieve", get),
    route("GET", _OBJ + r"/(?P<id>\w+)/(?P<field>\w+)", "blob", blob),
    route("PATCH", _OBJ + r"/(?P<id>\w+)", "update", update),
    route("DELETE", _OBJ + r"/(?P<id>\w+)", "delete", delete),
]
