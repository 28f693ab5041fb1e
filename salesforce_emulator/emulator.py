"""``Emulator``: the local Salesforce org in one object (store + HTTPS API + CDC publisher).

    with Emulator(tmp / "org", landing_dir=tmp / "landing") as emu:
        sf = Salesforce(instance_url=emu.instance_url, session_id=emu.token, session=session_verifying(emu.ca_file))

With ``pubsub=True`` it also serves the Pub/Sub API over gRPC (``pubsub_address``, same TLS CA) from an event bus
kept in ``events.sqlite``; without a ``landing_dir`` it then writes no landing files itself (a subscriber does).

The store exists as soon as the object does (a workload can build the org before ``start()``); ``start()`` binds
127.0.0.1 and serves HTTPS from a background thread; ``stop()`` publishes pending events and closes everything.
``custom_objects=N`` gives the org N generated custom objects ``Thing_001__c`` .. (``custom_objects.py``: describe,
SOQL, REST, Bulk and CDC like any object; a restart keeps them). Off by default. ``person_accounts=False`` builds
an org without Person Accounts (Account as such an org describes it, ``schema.BUSINESS_ACCOUNT``); the default
(``None``) is the kind the org was built with, a new one with them. ``org_number`` makes the org id
(``tenant_id``, userinfo's ``organization_id``): ``00D`` plus that number, so two emulators can be two orgs (or a
refreshed sandbox: the same data under a new id).
``admin_token`` is the session of the org's admin, a user distinct from the integration user the OAuth login gives:
the admin changes the schema (Tooling API ``CustomField``) and field-level security (``PermissionSet``,
``FieldPermissions``, ``PermissionSetAssignment``) while the org replicates (``org_setup.py``).
Everything durable lives in ``data_dir`` (``org.sqlite``, ``tls/``, ``bulk/``), so a new Emulator on the same
directory is a restart of the same org.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from pathlib import Path
from typing import Any

from salesforce_emulator import ids
from salesforce_emulator.api import Api
from salesforce_emulator.event_log import DEFAULT_RETENTION_SECONDS, EventLog
from salesforce_emulator.faults import FaultConfig
from salesforce_emulator.publisher import CdcPublisher
from salesforce_emulator.pubsub_server import PubSubServer, PubSubServicer
from salesforce_emulator.server import NetworkFault, serve_in_thread
from salesforce_emulator.store import Store
from salesforce_emulator.tls import ensure_tls

log = logging.getLogger(__name__)


class Emulator:
    api_version = "59.0"

    def __init__(
        self,
        data_dir: Path,
        landing_dir: Path | None = None,
        port: int = 0,
        token: str = "dev-token",
        daily_request_limit: int = 1_000_000,
        cdc_objects: list[str] | None = None,
        faults: FaultConfig | None = None,
        *,
        host: str = "127.0.0.1",
        roll_bytes: int = 8 << 20,
        roll_seconds: float = 2.0,
        client_id: str = "emulator-client",
        client_secret: str = "emulator-secret",
        username: str = "dev@emulator.local",
        password: str = "dev-password",
        security_token: str = "",
        pubsub: bool = False,
        pubsub_port: int = 0,
        retention_seconds: float = DEFAULT_RETENTION_SECONDS,
        keepalive_seconds: float = 270.0,
        jwt_certificate: str | None = None,
        name_order: str = "western",
        keep_states: bool = False,
        custom_objects: int = 0,
        person_accounts: bool | None = None,
        org_number: int = 1,
        admin_token: str = "admin-token",
    ):
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.landing_dir = Path(landing_dir) if landing_dir is not None else None
        self.host, self.port, self.token = host, port, token
        self.faults = faults or FaultConfig()
        self.store = Store(
            self.data_dir / "org.sqlite",
            name_order,
            keep_states=keep_states,
            custom_objects=custom_objects,
            person_accounts=person_accounts,
        )
        self.publisher: CdcPublisher | None = None
        self.events = EventLog(self.data_dir / "events.sqlite", retention_seconds) if pubsub else None
        if self.landing_dir is not None or self.events is not None:
            self.publisher = CdcPublisher(
                self.landing_dir,
                cdc_objects,
                self.faults,
                max_bytes=roll_bytes,
                max_age_seconds=roll_seconds,
                events=self.events,
                # The subscriber is the integration user: its events leave out the fields it cannot read.
                hidden=lambda entity: self.store.setup.hidden_fields(entity, self.store.default_user_id),
            )
            self.store.add_listener(self.publisher)
        self.tenant_id = ids.make_id("00D", org_number)  # the org id (userinfo organization_id, Pub/Sub tenantid)
        self.pubsub_port, self.keepalive_seconds = pubsub_port, keepalive_seconds
        self._pubsub: PubSubServer | None = None
        self._tls = ensure_tls(self.data_dir / "tls")
        self.ca_file = str(self._tls.ca_file)
        credentials = {
            "client_id": client_id,
            "client_secret": client_secret,
            "username": username,
            "password": password,
            "security_token": security_token,
            "jwt_certificate": jwt_certificate,
        }
        self.api = Api(
            self.store,
            token=token,
            daily_request_limit=daily_request_limit,
            bulk_dir=self.data_dir / "bulk",
            credentials=credentials,
            api_version=self.api_version,
            org_id=self.tenant_id,
            admin_token=admin_token,
        )
        self._server: Any = None
        self._ticker: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> Emulator:
        if self._server is not None:
            return self
        self._server, _ = serve_in_thread(self.host, self.port, self.api.dispatcher, self._tls.server_context())
        self.port = self._server.server_address[1]
        self.api.instance_url = self.instance_url
        if self.events is not None:
            servicer = PubSubServicer(
                self.events,
                lambda: self.api.token,
                self.tenant_id,
                self.keepalive_seconds,
                self.instance_url,
                faults=lambda: self.faults,
                org=self.store,
            )
            self._pubsub = PubSubServer(servicer, self._tls, self.host, self.pubsub_port).start()
            self.pubsub_port = self._pubsub.port
        self._stopping.clear()
        if self.publisher is not None:
            self._ticker = threading.Thread(target=self._tick, name="salesforce-emulator-cdc-roll", daemon=True)
            self._ticker.start()
        log.info("Salesforce emulator serving %s (CA %s)", self.instance_url, self.ca_file)
        return self

    def _tick(self) -> None:
        assert self.publisher is not None
        while not self._stopping.wait(0.25):
            self.publisher.writer.maybe_roll()

    def stop(self) -> None:
        self._stopping.set()
        if self._pubsub is not None:
            self._pubsub.stop()
            self._pubsub = None
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._ticker is not None:
            self._ticker.join(timeout=2)
            self._ticker = None
        if self.publisher is not None:
            with self.store.lock:
                self.publisher.writer.close()
        self.store.close()
        if self.events is not None:
            self.events.close()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connection details -------------------------------------------------------------------------
    @property
    def instance_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not serving yet: call start() first")
        return f"https://{self.host}:{self.port}"

    @property
    def pubsub_address(self) -> str:
        """``host:port`` of the Pub/Sub API (gRPC over TLS; trust ``ca_file``)."""
        if self._pubsub is None:
            raise RuntimeError("the Pub/Sub API is not serving: Emulator(pubsub=True) and start() first")
        return self._pubsub.address

    @property
    def admin_token(self) -> str:
        """The session of the org's admin (``Store.admin_user_id``): the user who adds, changes and deletes custom
        fields (Tooling API) and grants field access (PermissionSet, FieldPermissions, PermissionSetAssignment)."""
        return self.api.admin_token

    @property
    def credentials(self) -> dict[str, str | None]:
        """The connected app and integration user the OAuth flows accept (client_id, client_secret, username, ...)."""
        return dict(self.api.credentials)

    def register_jwt_certificate(self, certificate_pem: str) -> None:
        """Upload a certificate (PEM) to the connected app: JWT bearer assertions signed with its key log in."""
        self.api.credentials["jwt_certificate"] = certificate_pem

    def expire_session(self, new_token: str | None = None) -> str:
        """Invalidate the current access token (sessions expire): REST calls and open Pub/Sub streams with it now
        fail as unauthenticated; an OAuth login returns the new token."""
        self.token = self.api.token = new_token or f"token-{uuid.uuid4().hex[:12]}"
        return self.token

    def expire_events_through(self, replay_id: int) -> None:
        """Drop the event bus's events up to ``replay_id``, as if they had aged out of the retention window."""
        if self.events is None:
            raise RuntimeError("the event bus needs Emulator(pubsub=True)")
        self.events.expire_through(replay_id)

    # -- CDC ------------------------------------------------------------------------------------------
    def flush_cdc(self, include_late: bool = True) -> list[Path]:
        """Make every pending event visible now (and held-back late files, unless ``include_late=False``).
        Returns every landing file published so far."""
        if self.publisher is None:
            return []
        with self.store.lock:
            self.publisher.writer.flush(include_late=include_late)
            return list(self.publisher.writer.published)

    def set_faults(self, faults: FaultConfig | None = None, **changes: Any) -> FaultConfig:
        """Replace the fault knobs, or change some of them: ``emu.set_faults(gap_fraction=0.1)``."""
        new = dataclasses.replace(faults or self.faults, **changes)
        self.faults = new
        if self.publisher is not None:
            with self.store.lock:
                self.publisher.set_faults(new)
        return new

    def set_cdc_objects(self, cdc_objects: list[str] | None) -> None:
        if self.publisher is None:
            raise RuntimeError("CDC needs a landing_dir")
        with self.store.lock:
            self.publisher.set_objects(cdc_objects)

    # -- commit clock (store.py: what Salesforce documents about its timestamps) -----------------------
    def same_timestamp_commits(self, count: int) -> None:
        """The next ``count`` transactions share the newest commit timestamp (and so SystemModstamp), as a burst
        within one millisecond does; a record changed twice in it still gets increasing stamps."""
        self.store.skew_next_commits([0] * count)

    def late_commits(self, count: int, behind_ms: int) -> None:
        """The next ``count`` transactions commit ``behind_ms`` before the newest one: their rows carry an older
        SystemModstamp than rows already visible (Salesforce stamps a transaction before it commits). A record's
        own SystemModstamp never moves back: one stamped at or after that time makes the transaction commit 1 ms
        after it."""
        self.store.skew_next_commits([-behind_ms] * count)

    # -- big tables (bulk_synthetic.py) ---------------------------------------------------------------------
    def add_bulk_object(self, records: int, columns: int = 64, seed: int = 7) -> str:
        """Serve ``Wide_Thing__c`` with `records` records of `columns` fields through describe and Bulk API 2.0
        query jobs only, each result page generated from its row range (no store rows: any size, constant
        memory). Returns the object's name."""
        from salesforce_emulator.bulk_synthetic import BulkObject
        from salesforce_emulator.custom_objects import wide_object
        from salesforce_emulator.schema import register

        obj = register(wide_object(columns))
        self.api.bulk_objects[obj.name] = BulkObject(obj, records, seed)
        return obj.name

    # -- API accounting -------------------------------------------------------------------------------
    def request_counts(self) -> dict[str, int]:
        return dict(self.api.dispatcher.counts)

    def reset_request_counts(self) -> None:
        self.api.dispatcher.counts.clear()

    def api_usage(self) -> dict[str, int]:
        return {"used": self.api.budget_used, "limit": self.api.daily_request_limit}

    def set_request_budget(self, daily_request_limit: int | None = None, used: int | None = None) -> None:
        if daily_request_limit is not None:
            self.api.daily_request_limit = daily_request_limit
        if used is not None:
            self.api.budget_used = used

    def fail_next_requests(self, count: int, status: int = 503) -> None:
        """The next ``count`` authenticated requests fail with ``status`` (to exercise client retries);
        ``count=0`` cancels the failures still pending."""
        if count == 0:
            self.api.dispatcher.fail_next.clear()
        self.api.dispatcher.fail_next.extend([status] * count)

    def stall_next_requests(self, count: int, seconds: float, kind: str | None = None) -> None:
        """The next ``count`` authenticated requests (of endpoint ``kind``, e.g. ``"bulk_results"``, or any) answer
        only after ``seconds``: a client with a shorter timeout sees a read timeout."""
        self.api.dispatcher.network_faults.extend([NetworkFault(kind, stall_seconds=seconds)] * count)

    def drop_next_responses(self, count: int, kind: str | None = None) -> None:
        """The next ``count`` authenticated responses (of endpoint ``kind``, or any) send their headers and half
        their body, then the connection drops (a network failure in the middle of e.g. a Bulk result page)."""
        self.api.dispatcher.network_faults.extend([NetworkFault(kind, drop=True)] * count)

    def clear_network_faults(self) -> None:
        self.api.dispatcher.network_faults.clear()
