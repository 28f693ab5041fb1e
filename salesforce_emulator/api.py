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
    ):
        self.store = store
        self.token = token
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

    def remember_cursor(self, cursor_id: str, cursor: Any) -> None:
        with self.lock:
            self.cursors[cursor_id] = cursor
            while len(self.cursors) > MAX_CURSORS:
                self.cursors.popitem(last=False)


def all_routes() -> list[Route]:
    from salesforce_emulator import api_bulk, api_collections, api_oauth, api_query, api_rest

    return [*api_oauth.ROUTES, *api_rest.ROUTES, *api_query.ROUTES, *api_collections.ROUTES, *api_bulk.ROUTES]
