"""What the org's admin does in the end-to-end tests, through the APIs Salesforce documents (Tooling API
`CustomField`, `PermissionSet`, `FieldPermissions`), and how a test waits for the daemon to follow."""

from __future__ import annotations

import time
from collections.abc import Callable

from simple_salesforce import Salesforce

from salesforce_emulator import Emulator
from salesforce_emulator.client import simple_salesforce_client


def settled_until(stack, holds: Callable[[], bool], timeout_seconds: float = 300.0) -> None:
    """Wait for the sensors to settle and `holds()`: what the describe sensor finds is found within its window
    (DESCRIBE_EVERY) after the org changed, which may be after the workload's runs settled."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        stack.wait_settled(timeout_seconds=600)
        if holds() or time.monotonic() > deadline:
            return
        time.sleep(5)


def admin_of(emu: Emulator) -> Salesforce:
    return simple_salesforce_client(emu, token=emu.admin_token)


def add_field(admin: Salesforce, name: str, metadata: dict, obj: str = "Account") -> str:
    return admin.restful(
        "tooling/sobjects/CustomField", method="POST", json={"FullName": f"{obj}.{name}", "Metadata": metadata}
    )["id"]


def grant_read(admin: Salesforce, permission_set: str, name: str, obj: str = "Account") -> str:
    grant = {"ParentId": permission_set, "SobjectType": obj, "Field": f"{obj}.{name}", "PermissionsRead": True}
    return admin.FieldPermissions.create(grant)["id"]


def set_values(emu: Emulator, values: dict[str, dict], obj: str = "Account") -> None:
    with emu.store.transaction(user_id=emu.store.admin_user_id) as txn:
        for record_id, fields in values.items():
            txn.update(obj, record_id, fields)
