"""The org's Pub/Sub API over gRPC (HTTP/2, TLS): GetTopic, GetSchema and Subscribe on change event channels.

It serves the events of :class:`EventLog` (the ones the CDC publisher builds, re-encoded to Avro by
``pubsub_avro``), and behaves as Salesforce documents:

- **auth** (Pub/Sub API guide, "Authentication" and "Include Authorization Headers in RPC Method Calls"): every
  call carries ``accesstoken`` (the session), ``instanceurl`` (the org's URL, ``https://host[:port]``) and
  ``tenantid`` (the org id, 15 or 18 characters) in its metadata; any of them missing or wrong is
  ``UNAUTHENTICATED`` with the ``error-code`` trailer ``sfdc.platform.eventbus.grpc.service.auth.error`` and a
  message naming the header, and an open stream ends that way once the session it was opened with is no longer
  valid (the token rotated: ``Emulator.expire_session``);
- **topics**: ``/data/ChangeEvents`` (every CDC-enabled object) or ``/data/<Object>ChangeEvent``; a later
  FetchRequest may omit the topic but not name another one (``INVALID_ARGUMENT``: the topic of a stream cannot
  change, pubsub_api.proto);
- **replay**: ``LATEST`` (the tip), ``EARLIEST`` (the oldest retained event), ``CUSTOM`` (after a replay id); a
  replay id outside retention, or one never issued, fails with ``INVALID_ARGUMENT`` and the documented
  ``error-code`` trailer ``sfdc.platform.eventbus.grpc.subscription.fetch.replayid.corrupted`` ("Handle Errors":
  one possible cause is an old replay id outside the 72-hour retention);
- **flow control**: a stream sends at most the events its FetchRequests asked for (``num_requested`` adds up,
  each request counting for at most 100, the most one FetchRequest may ask for);
- **keepalive**: with nothing to send for ``keepalive_seconds`` (270 s in Salesforce), an empty FetchResponse
  carries the latest replay id of the stream.

Off by default, ``FaultConfig`` (read at each send) may make replay ids opaque bytes of varying length, or spoil
chosen events (``poison_events``): see ``pubsub_faults.py``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from typing import TYPE_CHECKING, Any

import grpc

from cdc_subscriber.proto import pb, services
from salesforce_emulator.event_log import EventLog
from salesforce_emulator.pubsub_avro import encode_event, entity_for_schema, schema_id, schema_json
from salesforce_emulator.pubsub_faults import decode_replay, encode_replay, poisoned, spoil
from salesforce_emulator.schema import OBJECTS, SObject
from salesforce_emulator.tls import TlsFiles

if TYPE_CHECKING:
    from salesforce_emulator.store import Store

log = logging.getLogger(__name__)

ALL_CHANGES = "/data/ChangeEvents"
MAX_BATCH = 100
REPLAY_CORRUPTED = "sfdc.platform.eventbus.grpc.subscription.fetch.replayid.corrupted"
AUTH_ERROR = "sfdc.platform.eventbus.grpc.service.auth.error"


def same_org_id(given: str, org_id: str) -> bool:
    """An org id in its 15- or 18-character form (the 18-character one adds a case checksum)."""
    return bool(given) and (given == org_id or given == org_id[:15])


class _Demand:
    """Events a stream may still send: FetchRequests add, deliveries take."""

    def __init__(self, changed: threading.Condition, topic: str):
        self.value = 0
        self.changed = changed
        self.topic = topic
        self.error: str | None = None  # a FetchRequest the stream must be refused for

    def add(self, n: int) -> None:
        with self.changed:
            self.value += min(max(0, n), MAX_BATCH)
            self.changed.notify_all()

    def consume(self, requests: Iterator[Any]) -> None:
        try:
            for request in requests:
                if request.topic_name and request.topic_name != self.topic:
                    with self.changed:
                        self.error = (
                            f"FetchRequest names topic {request.topic_name!r} on a stream of {self.topic!r}: "
                            "the topic of a subscription cannot change; open a new Subscribe stream"
                        )
                        self.changed.notify_all()
                    return
                self.add(request.num_requested)
        except grpc.RpcError:
            pass  # the client went away; the sending loop notices through context.is_active()


class PubSubServicer(services.PubSubServicer):
    def __init__(
        self,
        events: EventLog,
        token: Callable[[], str],
        tenant_id: str,
        keepalive_seconds: float,
        instance_url: str,
        faults: Callable[[], Any] = lambda: None,
        objects: Iterable[SObject] | None = None,
        org: Store | None = None,
    ):
        self.events = events
        # The org (its objects change as its admin adds and deletes fields, and it keeps every schema version it
        # served), or a fixed list of objects (default: the default org's): what events and schemas are made of.
        self.org = org
        self.objects = {o.name.lower(): o for o in objects or OBJECTS.values()}
        self.faults = faults  # the emulator's FaultConfig now (None: no faults)
        self.token = token
        self.tenant_id = tenant_id
        self.instance_url = instance_url.rstrip("/")
        self.keepalive_seconds = keepalive_seconds
        self.stopping = threading.Event()

    # -- helpers ------------------------------------------------------------------------------------------
    def _authenticate(self, context: grpc.ServicerContext) -> str:
        metadata = dict(context.invocation_metadata())
        token = metadata.get("accesstoken", "")
        wrong = [
            name
            for name, ok in (
                ("accesstoken", token == self.token()),
                ("instanceurl", metadata.get("instanceurl", "").rstrip("/") == self.instance_url),
                ("tenantid", same_org_id(metadata.get("tenantid", ""), self.tenant_id)),
            )
            if not ok
        ]
        if wrong:
            self._unauthenticated(
                context,
                f"Invalid {', '.join(wrong)} in the call metadata: send the session's "
                "access token, the org's instance URL and its org id (from "
                "/services/oauth2/userinfo); log in again if the session expired",
            )
        return token

    def find(self, name: str) -> SObject | None:
        return self.org.find(name) if self.org is not None else self.objects.get(name.lower())

    def schema(self, schema_id_: str) -> SObject | None:
        """The object version whose change events have schema id `schema_id_` (an earlier one included)."""
        if self.org is not None:
            return self.org.setup.schemas.get(schema_id_)
        return entity_for_schema(schema_id_, self.objects.values())

    @staticmethod
    def _unauthenticated(context: grpc.ServicerContext, message: str) -> None:
        context.set_trailing_metadata((("error-code", AUTH_ERROR),))
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    def _entities(self, topic: str, context: grpc.ServicerContext) -> set[str] | None:
        if topic == ALL_CHANGES:
            return None
        name = topic.removeprefix("/data/").removesuffix("ChangeEvent")
        obj = self.find(name) if topic.startswith("/data/") and topic.endswith("ChangeEvent") else None
        if obj is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Topic {topic!r} not found: use /data/ChangeEvents or /data/<Object>ChangeEvent",
            )
        return {obj.name}  # type: ignore[union-attr]

    def _start(self, request: Any, context: grpc.ServicerContext) -> int:
        if request.replay_preset == pb.ReplayPreset.Value("EARLIEST"):
            return self.events.earliest()
        if request.replay_preset != pb.ReplayPreset.Value("CUSTOM"):
            return self.events.tip
        replay = decode_replay(request.replay_id)
        if replay is None or replay > self.events.tip:
            context.set_trailing_metadata((("error-code", REPLAY_CORRUPTED),))
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "The Replay ID validation failed: the replay id is corrupted or was never issued",
            )
        if replay < self.events.purged_through:
            context.set_trailing_metadata((("error-code", REPLAY_CORRUPTED),))
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"The Replay ID validation failed: replay id {replay} is outside the retention window",
            )
        return replay

    def _replay_bytes(self, replay_id: int) -> bytes:
        faults = self.faults()
        return encode_replay(replay_id, bool(faults and faults.opaque_replay_ids))

    def _consumer_event(self, replay_id: int, line: str) -> Any:
        event = json.loads(line)
        # An event keeps the schema it was published with, though the object's fields changed since.
        obj = self.schema(event["data"].get("schema", "")) or self.find(
            event["data"]["payload"]["ChangeEventHeader"]["entityName"]
        )
        schema, payload = spoil(poisoned(self.faults(), replay_id), *encode_event(event, obj))
        return pb.ConsumerEvent(
            event=pb.ProducerEvent(id=str(replay_id), schema_id=schema, payload=payload),
            replay_id=self._replay_bytes(replay_id),
        )

    # -- RPCs ---------------------------------------------------------------------------------------------
    def GetTopic(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._authenticate(context)
        entities = self._entities(request.topic_name, context)
        schema = schema_id(self.find(next(iter(entities)))) if entities else ""  # type: ignore[arg-type]
        return pb.TopicInfo(
            topic_name=request.topic_name,
            tenant_guid=self.tenant_id,
            can_publish=False,
            can_subscribe=True,
            schema_id=schema,
            rpc_id=str(uuid.uuid4()),
        )

    def GetSchema(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._authenticate(context)
        entity = self.schema(request.schema_id)
        if entity is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Schema {request.schema_id!r} not found")
        return pb.SchemaInfo(
            schema_json=schema_json(entity),
            schema_id=request.schema_id,  # type: ignore[arg-type]
            rpc_id=str(uuid.uuid4()),
        )

    def Subscribe(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        token = self._authenticate(context)
        first = next(request_iterator, None)
        if first is None:
            return
        entities = self._entities(first.topic_name, context)
        cursor = self._start(first, context)
        demand = _Demand(self.events.changed, first.topic_name)
        demand.add(first.num_requested)
        threading.Thread(
            target=demand.consume, args=(request_iterator,), daemon=True, name="pubsub-fetch-requests"
        ).start()
        rpc_id = str(uuid.uuid4())
        last_sent = time.monotonic()
        while context.is_active() and not self.stopping.is_set():  # a half-closed request stream still gets its events
            if self.token() != token:
                self._unauthenticated(context, "Session expired or invalid: log in again")
            if demand.error:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, demand.error)
            with self.events.changed:
                if not (demand.value > 0 and self.events.tip > cursor) and not demand.error:
                    self.events.changed.wait(timeout=0.2)
            tip = self.events.tip
            if demand.value > 0 and tip > cursor:
                batch = self.events.read(cursor, tip, entities, min(demand.value, MAX_BATCH))
                if batch:
                    with self.events.changed:
                        demand.value -= len(batch)
                    cursor = batch[-1].replay_id
                    last_sent = time.monotonic()
                    yield pb.FetchResponse(
                        events=[self._consumer_event(e.replay_id, e.line) for e in batch],
                        latest_replay_id=self._replay_bytes(cursor),
                        rpc_id=rpc_id,
                        pending_num_requested=demand.value,
                    )
                    continue
                cursor = tip  # nothing on this topic up to the tip
            if time.monotonic() - last_sent >= self.keepalive_seconds:
                last_sent = time.monotonic()
                yield pb.FetchResponse(
                    latest_replay_id=self._replay_bytes(cursor), rpc_id=rpc_id, pending_num_requested=demand.value
                )


class PubSubServer:
    """A gRPC server on 127.0.0.1 (TLS with the emulator's certificate) in background threads."""

    def __init__(self, servicer: PubSubServicer, tls: TlsFiles, host: str = "127.0.0.1", port: int = 0):
        self.servicer = servicer
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="pubsub"))
        services.add_PubSubServicer_to_server(servicer, self.server)
        credentials = grpc.ssl_server_credentials([(tls.key_file.read_bytes(), tls.cert_file.read_bytes())])
        self.port = self.server.add_secure_port(f"{host}:{port}", credentials)
        self.host = host

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> PubSubServer:
        self.server.start()
        log.info("Pub/Sub API serving %s", self.address)
        return self

    def stop(self) -> None:
        self.servicer.stopping.set()
        self.server.stop(grace=1).wait()
