"""The emulator's API state shared by all endpoint modules: store, credentials, budget, cursors, bulk jobs."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from salesforce_emulator.server import Dispatcher, Route
from salesforce_emulator.store import Store

MAX_CURSORS = 64


class Api:
    def __init__(
        self,
        store: Store,
        *,
        token: str,
        daily_request_limit: int,
        bulk_dir: Path,
        credentials: dict[str, str],
        api_version: str = "59.0",
        org_id: str = "",
        admin_token: str = "admin-token",
    ):
        self.store = store
        self.token = token
        self.admin_token = admin_token  # the admin's session: the one that changes schema and permissions
        self.daily_request_limit = daily_request_limit
        self.budget_used = 0
        self.bulk_dir = bulk_dir
        self.credentials = credentials  # connected app (client_id, client_secret, jwt_certificate) and user
        self.org_id = org_id
        self.api_version = api_version
        self.instance_url = ""
        self.cursors: OrderedDict[str, Any] = OrderedDict()
        self.jobs: dict[str, Any] = {}
        self.bulk_objects: dict[str, Any] = {}  # name -> bulk_synthetic.BulkObject (records generated per page)
        self.result_page_records = 50_000  # records per page of the parallel result pages (resultPages)
        self.lock = threading.Lock()
        self.dispatcher = Dispatcher(self, all_routes())

    def session_user(self, token: str) -> str | None:
        """The user a session token belongs to (None: no such session)."""
        if token == self.token:
            return self.store.default_user_id
        if token == self.admin_token:
            return self.store.admin_user_id
        return None

    def is_admin(self, req: Any) -> bool:
        return req.user_id == self.store.admin_user_id

    def finder(self, req: Any) -> Any:
        """Look up objects as the request's user sees them (field-level security: ``Store.view``)."""
        return lambda name: self.store.view(name, req.user_id or None)

    def resolve(self, req: Any, name: str) -> Any:
        """The object `name` as the request's user sees it, or Salesforce's NOT_FOUND error."""
        from salesforce_emulator.changes import resolve_object

        return resolve_object(name, self.finder(req))

    def remember_cursor(self, cursor_id: str, cursor: Any) -> None:
        with self.lock:
            self.cursors[cursor_id] = cursor
            while len(self.cursors) > MAX_CURSORS:
                self.cursors.popitem(last=False)


def all_routes() -> list[Route]:
    from salesforce_emulator import api_bulk, api_collections, api_oauth, api_query, api_rest, api_tooling

    return [
        *api_oauth.ROUTES,
        *api_tooling.ROUTES,
        *api_rest.ROUTES,
        *api_query.ROUTES,
        *api_collections.ROUTES,
        *api_bulk.ROUTES,
    ]
