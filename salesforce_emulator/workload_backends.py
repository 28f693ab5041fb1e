"""Where workload transactions go: straight into the store (fast) or through the REST API (realistic).

A workload transaction is a list of :class:`Op`. The store backend runs it as one database transaction. The
REST backend maps it onto the calls a real integration would make: one record → sObject REST; many updates,
creates or deletes → sObject Collections (one transaction per 200 records); a mix with references between
records (lead conversion) → ``composite`` with ``allOrNone`` (one transaction per 25 subrequests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from salesforce_emulator.schema import BY_PREFIX
from salesforce_emulator.store import Store

ORIGIN = "com/salesforce/api/rest/59.0;client=salesforce-emulator-workload"


@dataclass(frozen=True)
class Ref:
    """A reference to a record created earlier in the same transaction."""

    name: str


@dataclass
class Op:
    kind: str  # create | update | delete | undelete | purge
    object: str
    record_id: str | None = None
    fields: dict[str, Any] | None = None
    ref: str | None = None


class Backend(Protocol):
    def execute(self, ops: list[Op]) -> dict[str, str]:
        """Run ``ops`` as one transaction; return the ids of created records by ``ref``."""

    def live_and_deleted(self, object_name: str) -> tuple[list[str], list[str]]:
        """Ids of live and recycle-bin records of an object, in Id order."""

    def value(self, object_name: str, record_id: str, field: str) -> Any:
        """One field's current value (an edit starts from it)."""

    def person_accounts(self) -> bool:
        """Whether the org has Person Accounts enabled."""


def _resolve(fields: dict[str, Any] | None, created: dict[str, str]) -> dict[str, Any]:
    return {k: created[v.name] if isinstance(v, Ref) else v for k, v in (fields or {}).items()}


class StoreBackend:
    def __init__(self, store: Store):
        self.store = store

    def execute(self, ops: list[Op]) -> dict[str, str]:
        created: dict[str, str] = {}
        with self.store.transaction(origin=ORIGIN) as txn:
            for index, op in enumerate(ops):
                if op.kind == "create":
                    created[op.ref or f"new{index}"] = txn.create(op.object, _resolve(op.fields, created))
                elif op.kind == "update":
                    txn.update(op.object, str(op.record_id), _resolve(op.fields, created))
                elif op.kind == "delete":
                    txn.delete(op.object, [str(op.record_id)])
                elif op.kind == "undelete":
                    txn.undelete(op.object, [str(op.record_id)])
                elif op.kind == "purge":
                    txn.purge(op.object, [str(op.record_id)])
        return created

    def live_and_deleted(self, object_name: str) -> tuple[list[str], list[str]]:
        rows = self.store.select(f'SELECT Id, IsDeleted FROM "{object_name}" ORDER BY Id')
        return [r["Id"] for r in rows if not r["IsDeleted"]], [r["Id"] for r in rows if r["IsDeleted"]]

    def value(self, object_name: str, record_id: str, field: str) -> Any:
        row = self.store.get_row(object_name, record_id)
        return row[field] if row else None

    def person_accounts(self) -> bool:
        return self.store.person_accounts


class RestBackend:
    """Drives a simple-salesforce client."""

    def __init__(self, sf: Any):
        self.sf = sf
        self.version = sf.sf_version

    def execute(self, ops: list[Op]) -> dict[str, str]:
        kinds = {op.kind for op in ops}
        has_refs = any(isinstance(v, Ref) for op in ops for v in (op.fields or {}).values())
        if len(ops) == 1 and not has_refs:
            return self._single(ops[0])
        if kinds == {"update"} and not has_refs:
            for start in range(0, len(ops), 200):
                self._collection(
                    "PATCH",
                    [
                        {"attributes": {"type": op.object}, "id": op.record_id, **(op.fields or {})}
                        for op in ops[start : start + 200]
                    ],
                )
            return {}
        if kinds == {"create"} and not has_refs:
            created: dict[str, str] = {}
            for start in range(0, len(ops), 200):
                chunk = ops[start : start + 200]
                results = self._collection(
                    "POST", [{"attributes": {"type": op.object}, **(op.fields or {})} for op in chunk]
                )
                for offset, (op, result) in enumerate(zip(chunk, results, strict=True)):
                    created[op.ref or f"new{start + offset}"] = result["id"]
            return created
        if kinds == {"delete"}:
            for start in range(0, len(ops), 200):
                ids = ",".join(str(op.record_id) for op in ops[start : start + 200])
                self._check(
                    self.sf.restful("composite/sobjects", method="DELETE", params={"ids": ids, "allOrNone": "true"})
                )
            return {}
        return self._composite(ops)

    def _single(self, op: Op) -> dict[str, str]:
        sobject = getattr(self.sf, op.object)
        if op.kind == "create":
            return {op.ref or "new0": sobject.create(op.fields or {})["id"]}
        if op.kind == "update":
            sobject.update(op.record_id, op.fields or {})
        elif op.kind == "delete":
            sobject.delete(op.record_id)
        elif op.kind == "undelete":
            self.sf.restful(f"sobjects/{op.object}/{op.record_id}/undelete", method="POST")
        elif op.kind == "purge":
            self.sf.restful(f"sobjects/{op.object}/{op.record_id}/recycleBin", method="DELETE")
        return {}

    def _collection(self, method: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        results = self.sf.restful(
            "composite/sobjects", method=method, data=json.dumps({"allOrNone": True, "records": records})
        )
        return self._check(results)

    @staticmethod
    def _check(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        failed = [r for r in results if not r.get("success")]
        if failed:
            raise RuntimeError(f"collection call failed: {failed[0].get('errors')}")
        return results

    def _composite(self, ops: list[Op]) -> dict[str, str]:
        created: dict[str, str] = {}
        base = f"/services/data/v{self.version}/sobjects"
        for start in range(0, len(ops), 25):
            requests = []
            for index, op in enumerate(ops[start : start + 25], start=start):
                ref = op.ref or f"op{index}"
                fields = {
                    k: (created.get(v.name) or f"@{{{v.name}.id}}") if isinstance(v, Ref) else v
                    for k, v in (op.fields or {}).items()
                }
                method, url = {
                    "create": ("POST", f"{base}/{op.object}"),
                    "update": ("PATCH", f"{base}/{op.object}/{op.record_id}"),
                    "delete": ("DELETE", f"{base}/{op.object}/{op.record_id}"),
                    "undelete": ("POST", f"{base}/{op.object}/{op.record_id}/undelete"),
                    "purge": ("DELETE", f"{base}/{op.object}/{op.record_id}/recycleBin"),
                }[op.kind]
                requests.append(
                    {
                        "method": method,
                        "url": url,
                        "referenceId": ref,
                        **({"body": fields} if op.kind in ("create", "update") else {}),
                    }
                )
            response = self.sf.restful(
                "composite", method="POST", data=json.dumps({"allOrNone": True, "compositeRequest": requests})
            )
            for sub in response["compositeResponse"]:
                if sub["httpStatusCode"] >= 400:
                    raise RuntimeError(f"composite subrequest {sub['referenceId']} failed: {sub['body']}")
                if isinstance(sub["body"], dict) and "id" in sub["body"]:
                    created[sub["referenceId"]] = sub["body"]["id"]
        return created

    def live_and_deleted(self, object_name: str) -> tuple[list[str], list[str]]:
        rows = self.sf.query_all(f"SELECT Id, IsDeleted FROM {object_name} ORDER BY Id", include_deleted=True)
        records = rows["records"]
        return [r["Id"] for r in records if not r["IsDeleted"]], [r["Id"] for r in records if r["IsDeleted"]]

    def value(self, object_name: str, record_id: str, field: str) -> Any:
        return getattr(self.sf, object_name).get(record_id)[field]

    def person_accounts(self) -> bool:
        # An org with Person Accounts enabled describes Account with IsPersonAccount (Salesforce Help, "Person
        # Accounts"); one without has no such field.
        return any(f["name"] == "IsPersonAccount" for f in self.sf.Account.describe()["fields"])


def object_of(record_id: str) -> str:
    return BY_PREFIX[record_id[:3]].name
