"""The Tooling API's ``CustomField`` sObject: how an admin adds, changes and deletes custom fields (org_setup.py).

- ``POST .../tooling/sobjects/CustomField`` with ``{"FullName": "Account.Loyalty_Tier__c", "Metadata": {"type":
  "Text", "label": "Loyalty Tier", "length": 40}}`` creates the field: ``201 {"id": "00N...", "success": true,
  "errors": [], "warnings": [], "infos": []}``;
- ``GET .../tooling/sobjects/CustomField/<id>`` reads it back (``TableEnumOrId``, ``DeveloperName``, ``FullName``,
  ``Metadata``, ``Length``, ``Precision``, ``Scale``);
- ``PATCH`` of the same record with ``{"Metadata": {...}}`` changes its type, length, precision or scale (``204``);
- ``DELETE`` deletes the field (``204``).

Only the admin's session may call them (``Emulator.admin_token``); the integration user gets
``INSUFFICIENT_ACCESS_OR_READONLY``.

The change event schema over REST (REST API Developer Guide, "Platform Event Schema by Event Name" and "... by
Schema ID"): ``GET .../sobjects/<Object>ChangeEvent/eventSchema`` (a custom object's: ``<Name>__ChangeEvent``) and
``GET .../event/eventSchema/<schemaId>`` answer the Avro schema the Pub/Sub API's GetSchema serves, with its id as
``uuid``; like GetSchema it lists every field of the object, also those the caller cannot read (Change Data Capture
Developer Guide, "Field-Level Security"). ``payloadFormat`` ``COMPACT`` and ``EXPANDED`` give the same (compact)
schema.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from salesforce_emulator.errors import ApiError
from salesforce_emulator.org_setup import insufficient_access
from salesforce_emulator.pubsub_avro import schema_json
from salesforce_emulator.server import Request, Response, route

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

_BASE = "/tooling/sobjects/CustomField"


def _admin(api: Api, req: Request) -> None:
    if not api.is_admin(req):
        raise insufficient_access("changing custom fields")


def _metadata(body: Any) -> dict[str, Any]:
    metadata = body.get("Metadata") if isinstance(body, dict) else None
    if not isinstance(metadata, dict):
        raise ApiError(400, "JSON_PARSER_ERROR", "Expected a JSON object with FullName and a Metadata object")
    return metadata


def create_field(api: Api, req: Request) -> Response:
    _admin(api, req)
    body = req.json()
    field_id = api.store.setup.create_field(str((body or {}).get("FullName") or ""), _metadata(body))
    return Response(201, {"id": field_id, "success": True, "errors": [], "warnings": [], "infos": []})


def get_field(api: Api, req: Request) -> Response:
    row = api.store.setup.custom_field(req.params["id"])
    metadata = json.loads(row["metadata"])
    return Response(
        body={
            "attributes": {
                "type": "CustomField",
                "url": f"/services/data/v{req.version}/tooling/sobjects/CustomField/{row['Id']}",
            },
            "Id": row["Id"],
            "TableEnumOrId": row["object"],
            "DeveloperName": row["name"].removesuffix("__c"),
            "FullName": f"{row['object']}.{row['name']}",
            "NamespacePrefix": None,
            "ManageableState": "unmanaged",
            "Length": metadata.get("length"),
            "Precision": metadata.get("precision"),
            "Scale": metadata.get("scale"),
            "Metadata": metadata,
        }
    )


def update_field(api: Api, req: Request) -> Response:
    _admin(api, req)
    api.store.setup.update_field(req.params["id"], _metadata(req.json()))
    return Response(204)


def delete_field(api: Api, req: Request) -> Response:
    _admin(api, req)
    api.store.setup.delete_field(req.params["id"])
    return Response(204)


def _schema_body(obj: Any) -> Response:
    return Response(body={**json.loads(schema_json(obj)), "uuid": obj.schema_id})


def event_schema_by_name(api: Api, req: Request) -> Response:
    event = req.params["event"]
    base = (
        event.removesuffix("__ChangeEvent") + "__c" if event.endswith("__ChangeEvent") else event[: -len("ChangeEvent")]
    )
    obj = api.store.find(base) if base else None
    if obj is None or not obj.cdc:
        raise ApiError(404, "NOT_FOUND", f"The requested resource does not exist: no change event {event}")
    return _schema_body(obj)


def event_schema_by_id(api: Api, req: Request) -> Response:
    obj = api.store.setup.schemas.get(req.params["schema"])
    if obj is None:
        raise ApiError(
            404, "NOT_FOUND", f"The requested resource does not exist: no event schema {req.params['schema']}"
        )
    return _schema_body(obj)


ROUTES = [
    route("GET", r"/sobjects/(?P<event>\w+ChangeEvent)/eventSchema", "event_schema", event_schema_by_name),
    route("GET", r"/event/eventSchema/(?P<schema>[\w-]+)", "event_schema", event_schema_by_id),
    route("POST", _BASE, "tooling", create_field),
    route("GET", _BASE + r"/(?P<id>\w+)", "tooling", get_field),
    route("PATCH", _BASE + r"/(?P<id>\w+)", "tooling", update_field),
    route("DELETE", _BASE + r"/(?P<id>\w+)", "tooling", delete_field),
]
