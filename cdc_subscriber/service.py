"""The subscriber: one Pub/Sub API stream of change events, landed as files, resumable after any crash.

One :class:`Subscriber` per topic (``/data/ChangeEvents``, or ``/data/<Object>ChangeEvent``). A session is:
log in through :class:`SalesforceResource` (token, instance URL, tenant id in the call metadata), ``GetTopic``,
then ``Subscribe`` from the saved position (``CUSTOM``), or ``initial_replay`` the first time. Then:

- each event is decoded to its CometD JSON line (``decode.py``) and written to the open landing file; the
  position moves only when ``landing.py`` reports the file holding it renamed into the zone;
- flow control: at most ``batch`` (<= 100) events are requested ahead; more are asked for as events are written;
- keepalive: an empty response moves the position to its ``latest_replay_id`` when nothing is waiting to land
  (so a quiet or filtered stream does not resume from far back); no response at all for ``keepalive_timeout``
  cancels the stream, which reconnects;
- a session that ends (network, server restart, cancelled) first lands what it wrote, then reconnects with
  exponential backoff (``FAILED`` meanwhile); ``UNAUTHENTICATED`` logs in again at once;
- a saved replay id the org no longer retains (older than 72 h, or corrupted: ``INVALID_ARGUMENT``) never
  silently restarts at the tip: a ``GAP_OVERFLOW`` marker is landed for every replicated object (the path an
  overflow takes: each replica is resynced from the org), then the stream continues from ``LATEST``. The saved
  position is left alone until that new stream delivers something, so a crash in between lands the marker again
  rather than skipping events;
- an event that cannot be decoded (corrupt bytes, a schema ``GetSchema`` cannot serve, an Avro shape or a bug the
  decoder cannot handle), or whose header cannot be landed (``header.py``: a commit time that is not epoch
  milliseconds, an entity name that is not an API name), never stops the topic: it becomes a dead letter
  (``dead_letters.py``): recorded durably, gap lines for the records its header names (or a resync of its entity,
  or of every replicated one) landed in its place, and the stream goes on. Failures that are not the event's (the
  schema or describe() call could not be made: network, session) still fail the stream, which retries the same
  event.

Replay ids are opaque bytes: the position is saved and resumed exactly as the org gave it, and compared only for
equality (a keepalive's ``latest_replay_id`` moves the position when it differs and nothing waits to land; the
server sends it only once every event before it was delivered). Their integer form is for display only.

``stop()`` (SIGTERM/SIGINT in the CLI) drains: the open file is landed, the position saved, the state PAUSED.
"""

from __future__ import annotations

import logging
import queue
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import requests

from cdc_subscriber import dead_letters
from cdc_subscriber.dead_letters import DeadLetter, DeadLetterStore, Salvage
from cdc_subscriber.decode import EventDecoder, dumps
from cdc_subscriber.header import InvalidHeader
from cdc_subscriber.landing import LandingFileWriter, private_spool
from cdc_subscriber.position import PositionStore, topic_slug
from cdc_subscriber.proto import pb, replay_as_long, services
from cdc_subscriber.status import StatusReporter
from resources.salesforce import SalesforceApiError, SalesforceResource
from resources.storage import is_uri
from shared.faults import fault_point
from shared.markers import overflow_marker

log = logging.getLogger(__name__)

ALL_CHANGES = "/data/ChangeEvents"
MAX_BATCH = 100
PERMANENT = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED}
MAX_AUTH_RETRIES = 3
NO_SUCH_OBJECT = (400, 404)  # describe() of an entity the org does not have: asking again cannot help
# Where a crash test kills the subscriber (CDC_FAULT_POINT, with CDC_FAULT_ACTION=kill), in the order they happen.
FAULT_POINTS = ("subscriber.after_write", "subscriber.after_rename", "subscriber.after_position")


class PermanentError(RuntimeError):
    """A failure retrying cannot fix (bad topic, no permission, no way to log in)."""


class StreamError(RuntimeError):
    """A stream that ended with a gRPC status (retried with backoff): ``UNAVAILABLE: <details>``."""


@dataclass
class SubscriberConfig:
    landing_dir: Path | str  # a local folder or an object-store URI (s3://bucket/landing)
    state_dir: Path | str  # likewise: positions, status and dead letters
    endpoint: str = "api.pubsub.salesforce.com:7443"
    topic: str = ALL_CHANGES
    entities: tuple[str, ...] = ()  # the replicated objects: a resync marker names each of them
    initial_replay: str = "LATEST"  # where a topic with no saved position starts: LATEST or EARLIEST
    ca_file: str | None = None  # None: the system's roots
    tenant_id: str | None = None  # None: asked from the org's userinfo
    batch: int = MAX_BATCH
    roll_bytes: int = 8 << 20
    roll_seconds: float = 2.0
    keepalive_timeout: float = 300.0
    backoff_initial: float = 0.5
    backoff_max: float = 60.0
    spool_dir: Path | None = None  # open files of an object-store zone; default a private temporary folder

    def __post_init__(self) -> None:
        topic_slug(self.topic)  # a topic name, or ValueError
        if not 1 <= self.batch <= MAX_BATCH:
            raise ValueError(f"batch must be between 1 and {MAX_BATCH} (Pub/Sub API flow control), got {self.batch}")
        if self.initial_replay not in ("LATEST", "EARLIEST"):
            raise ValueError(f"initial_replay must be LATEST or EARLIEST, got {self.initial_replay!r}")


def _requests(pending: queue.Queue[Any]) -> Iterator[Any]:
    while (request := pending.get()) is not None:
        yield request


def replay_rejected(exc: Any) -> bool:
    """The org refused the replay id we resumed from (not retained any more, or corrupted). ``exc`` is the
    ``grpc.RpcError`` of a call (it is also a ``grpc.Call``: code, details, trailers)."""
    if exc.code() != grpc.StatusCode.INVALID_ARGUMENT:
        return False
    error_code = str(dict(exc.trailing_metadata() or ()).get("error-code", "")).lower()
    return "replayid" in error_code or "replay" in (exc.details() or "").lower()


class Subscriber:
    def __init__(self, config: SubscriberConfig, salesforce: SalesforceResource):
        self.config = config
        self.salesforce = salesforce
        self.positions = PositionStore(config.state_dir, config.topic)
        self.reporter = StatusReporter(config.state_dir, config.topic, topic_slug(config.topic))
        # this process's own, removed when it stops (run()), when the zone is on an object store and none is given
        self._own_spool = (
            private_spool(topic_slug(config.topic)) if config.spool_dir is None and is_uri(config.landing_dir) else None
        )
        self.writer = LandingFileWriter(
            config.landing_dir,
            self._landed,
            max_bytes=config.roll_bytes,
            max_age_seconds=config.roll_seconds,
            spool_dir=config.spool_dir or self._own_spool,
        )
        self.decoder = EventDecoder(self._fetch_schema, self._field_types)
        self.dead_letters = DeadLetterStore(config.state_dir, config.topic)
        self.stopping = threading.Event()
        self._stub: Any = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._call: Any = None
        self._last_response = time.monotonic()
        self._from_tip = False
        self._silent = False  # the watchdog cancelled a stream that went quiet
        self._saved: bytes | None = self.positions.load()
        self.reporter.restored(self._saved, self.dead_letters.count)

    # -- callbacks ------------------------------------------------------------------------------------------
    def _landed(self, path: Path | str, lines: int, replay_id: bytes | None) -> None:
        if replay_id is not None:
            self.positions.save(replay_id)
            fault_point("subscriber.after_position")
            self._saved = replay_id
        self.reporter.landed(lines, replay_id)
        log.debug("landed %s (%d events, position %s)", path, lines, replay_id.hex() if replay_id else None)

    def _fetch_schema(self, schema_id: str) -> str:
        info = self._stub.GetSchema(pb.SchemaRequest(schema_id=schema_id), metadata=self._metadata, timeout=30)
        return info.schema_json

    def _field_types(self, entity: str) -> dict[str, str]:
        self.salesforce._describes.pop(entity, None)  # a new schema: the org's fields may have changed
        return {f["name"]: f["type"] for f in self.salesforce.describe(entity)["fields"]}

    def _tenant_id(self) -> str:
        if self.config.tenant_id is None:
            try:
                info = self.salesforce._request("GET", "/services/oauth2/userinfo").json()
                self.config.tenant_id = info.get("organization_id") or ""
            except SalesforceApiError as exc:
                log.warning(
                    "no tenant id (userinfo answered HTTP %s); set SF_TENANT_ID if the org needs it", exc.status
                )
                self.config.tenant_id = ""
        return self.config.tenant_id

    # -- the service ----------------------------------------------------------------------------------------
    def stop(self) -> None:
        self.stopping.set()
        call = self._call
        if call is not None:
            call.cancel()

    def run(self) -> str:
        """Stream until ``stop()`` or a permanent failure; returns the final state."""
        removed = self.writer.discard_orphans()
        if removed:
            log.info("removed %d in-flight landing files of a stopped subscriber (their events come again)", removed)
        ticker = threading.Thread(target=self._tick, name="subscriber-tick", daemon=True)
        ticker.start()
        final = "PAUSED"
        try:
            self._reconnect_until_stopped()
        except PermanentError as exc:
            log.error("stream %s failed permanently: %s", self.config.topic, exc)
            final = "FAILED_PERMANENTLY"
            self.reporter.set_state(final, exc)
        finally:
            self._wind_down(final, ticker)
        return final

    def _reconnect_until_stopped(self) -> None:
        """A session, and another after each failure (backed off, doubling), until ``stop()``; a PermanentError
        ends it."""
        backoff = self.config.backoff_initial
        auth_failures = 0
        while not self.stopping.is_set():
            self.reporter.set_state("STARTING")
            try:
                self._session()
                backoff, auth_failures = self.config.backoff_initial, 0
                continue
            except grpc.RpcError as exc:
                if self.stopping.is_set():
                    break
                handled = self._handle(exc, auth_failures)
                if handled is None:  # logged in again, or resynced: reconnect at once
                    auth_failures += exc.code() == grpc.StatusCode.UNAUTHENTICATED
                    continue
                error: BaseException = handled
            except (SalesforceApiError, requests.RequestException, OSError) as exc:
                if isinstance(exc, SalesforceApiError) and exc.status == 401:
                    self.salesforce.relogin()  # REST (describe) saw the session expire before gRPC did
                error = exc
            except PermanentError:
                raise
            except Exception as exc:  # e.g. an event that does not decode: report it, back off, resume from
                log.exception("stream %s: unexpected error", self.config.topic)  # the durable position
                error = exc
            log.warning("stream %s failed (%s); reconnecting in %.1fs", self.config.topic, error, backoff)
            self.reporter.set_state("FAILED", error)
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, self.config.backoff_max)

    def _wind_down(self, final: str, ticker: threading.Thread) -> None:
        """Land what is spooled, stop the ticker, remove this subscriber's spool and report `final`."""
        if final == "PAUSED":
            self.reporter.set_state("DRAINING")
        self.writer.roll()
        self.stopping.set()
        ticker.join(timeout=2)
        if self._own_spool is not None:
            # empty once rolled; should removing fail, the next subscriber to start removes it (remove_dead_spools)
            shutil.rmtree(self._own_spool, ignore_errors=True)
        self.reporter.set_state(final)

    def _handle(self, exc: Any, auth_failures: int) -> BaseException | None:
        """None when the failure is dealt with (log in again; resync) and the stream may reconnect at once, else
        the error to report and back off from; raises PermanentError when retrying cannot help."""
        code, details = exc.code(), exc.details()
        if self._silent:
            self._silent = False
            return TimeoutError(f"no keepalive within {self.config.keepalive_timeout:.0f}s: stream cancelled")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            if auth_failures >= MAX_AUTH_RETRIES:
                raise PermanentError(
                    f"the org rejects every session ({details}): check the SF_* credentials; a "
                    "fixed SF_ACCESS_TOKEN cannot be renewed"
                ) from exc
            log.warning("Pub/Sub API rejected the session (%s): logging in again", details)
            self.reporter.set_state("STARTING", f"session rejected: {details}; logged in again")
            self.salesforce.relogin()
            return None
        if replay_rejected(exc):
            self._resync(exc)
            return None
        if code in PERMANENT:
            raise PermanentError(f"{code.name}: {details}") from exc
        return StreamError(f"{code.name}: {details}")

    def _tick(self) -> None:
        while not self.stopping.wait(0.1):
            self.writer.tick()
            self.reporter.write()
            call = self._call
            if call is not None and time.monotonic() - self._last_response > self.config.keepalive_timeout:
                self._silent = True
                log.warning("no response (not even a keepalive) for %.0fs: reconnecting", self.config.keepalive_timeout)
                call.cancel()

    def _first_request(self) -> Any:
        saved = self.positions.load()
        request = pb.FetchRequest(topic_name=self.config.topic, num_requested=self.config.batch)
        if self._from_tip:
            # Once only: should this stream fail before anything lands, the next one is refused the stale id again
            # and lands a fresh marker first, so the tip is never reached without a resync marker right before it.
            self._from_tip = False
            request.replay_preset = pb.ReplayPreset.Value("LATEST")
        elif saved is not None:
            request.replay_preset = pb.ReplayPreset.Value("CUSTOM")
            request.replay_id = saved
        else:
            request.replay_preset = pb.ReplayPreset.Value(self.config.initial_replay)
        return request

    def _session(self) -> None:
        token, instance_url = self.salesforce.session()
        self._metadata = (("accesstoken", token), ("instanceurl", instance_url), ("tenantid", self._tenant_id()))
        root = Path(self.config.ca_file).read_bytes() if self.config.ca_file else None
        options = [
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.max_receive_message_length", 64 << 20),
        ]
        with grpc.secure_channel(self.config.endpoint, grpc.ssl_channel_credentials(root), options) as channel:
            self._stub = services.PubSubStub(channel)
            topic = self._stub.GetTopic(
                pb.TopicRequest(topic_name=self.config.topic), metadata=self._metadata, timeout=30
            )
            if not topic.can_subscribe:
                raise PermanentError(f"this user may not subscribe to {self.config.topic}")
            pending: queue.Queue[Any] = queue.Queue()
            first = self._first_request()
            pending.put(first)
            self._last_response = time.monotonic()
            self._call = self._stub.Subscribe(_requests(pending), metadata=self._metadata)
            if self.stopping.is_set():
                self._call.cancel()
            log.info("subscribed to %s (%s)", self.config.topic, pb.ReplayPreset.Name(first.replay_preset))
            self.reporter.set_state("RUNNING")
            try:
                self._consume(self._call, pending)
            finally:
                pending.put(None)
                self._call = None
                self.writer.roll()  # land what this session wrote before the next one resumes after it

    def _consume(self, call: Any, pending: queue.Queue[Any]) -> None:
        outstanding = self.config.batch
        for response in call:
            self._last_response = time.monotonic()
            for event in response.events:
                self._land(event)
                fault_point("subscriber.after_write")  # in the open (invisible) file only
            outstanding -= len(response.events)
            if not response.events:
                self._keepalive(response.latest_replay_id)
            if outstanding <= self.config.batch // 2:
                pending.put(
                    pb.FetchRequest(topic_name=self.config.topic, num_requested=self.config.batch - outstanding)
                )
                outstanding = self.config.batch

    def _land(self, event: Any) -> None:
        """Write one event's CometD line to the open landing file, or its dead letter's salvage lines."""
        try:
            decoded = self.decoder.decode(event, self.config.topic)
            header = decoded["data"]["payload"]["ChangeEventHeader"]
            line, commit_ts, key = dumps(decoded), header["commitTimestamp"], header["transactionKey"]
        except grpc.RpcError as exc:
            if not dead_letters.schema_unavailable(exc):
                raise  # the org could not answer now (network, session): the stream retries this event
            self._dead_letter(
                event, f"schema {event.event.schema_id} cannot be fetched: {exc.code().name}: {exc.details()}"
            )
            return
        except SalesforceApiError as exc:
            if exc.status not in NO_SUCH_OBJECT:
                raise  # describe() could not be asked now: not the event's fault; the stream retries it
            self._dead_letter(event, f"describe() of the event's entity failed: {exc}")
            return
        except (requests.RequestException, OSError):
            raise  # the org could not be reached for describe(): the stream retries this event
        except InvalidHeader as exc:
            self._dead_letter(event, f"its header cannot be landed: {exc}")
            return
        except Exception as exc:  # noqa: BLE001 anything else the event makes decode raise becomes its dead letter, with the reason
            self._dead_letter(event, f"{type(exc).__name__}: {exc}")
            return
        self.reporter.received(commit_ts)
        self.writer.write(line, commit_ts, key, event.replay_id)

    def _schema_text(self, schema_id: str) -> str | None:
        """The schema JSON for salvaging a dead letter; None when the org cannot serve it."""
        try:
            return self._fetch_schema(schema_id)
        except grpc.RpcError as exc:
            if dead_letters.schema_unavailable(exc):
                return None
            raise

    def _dead_letter(self, event: Any, reason: str) -> None:
        """Record the event durably as a dead letter, then land what can be salvaged in its place (the position
        passes it only once that file is landed, like any event)."""
        consumer, replay_id = event.event, event.replay_id
        found: Salvage = dead_letters.salvage(
            replay_id=replay_id,
            schema_id=consumer.schema_id,
            payload=consumer.payload,
            schema_text=self._schema_text(consumer.schema_id),
            channel=self.config.topic,
            entities=self.config.entities,
        )
        letter = DeadLetter.of(self.config.topic, replay_id, consumer.schema_id, consumer.payload, reason, found)
        new = self.dead_letters.record(letter)
        log.warning(
            "stream %s: event with replay id %s (schema %s, entity %s) cannot be landed: %s; %s; "
            "recorded as a dead letter in %s%s",
            self.config.topic,
            replay_id.hex(),
            consumer.schema_id,
            found.entity or "unknown",
            reason,
            found.action,
            self.dead_letters.path,
            "" if new else " (already recorded: re-delivered after a restart)",
        )
        for line in found.lines:
            self.writer.write(dumps(line), found.commit_ts, found.transaction_key, replay_id)
        self.reporter.dead_lettered(f"replay id {replay_id.hex()}: {reason}", new)

    def _keepalive(self, latest: bytes) -> None:
        with self.writer.lock:
            if latest and not self.writer.pending and latest != self._saved:
                self.positions.save(latest)
                self._saved = latest
                self.reporter.moved_to(latest)
        self.reporter.caught_up()

    def _resync(self, exc: Any) -> None:
        """The saved replay id is gone: land a GAP_OVERFLOW per replicated object, then continue from the tip."""
        if not self.config.entities:
            raise PermanentError(
                "the saved replay id is no longer retained and no replicated objects are "
                "configured to resync: pass --config replication.yaml"
            )
        now = int(time.time() * 1000)
        key = f"subscriber-resync-{uuid.uuid4()}"
        for sequence, entity in enumerate(self.config.entities, start=1):
            self.writer.write(
                dumps(resync_marker(entity, key, sequence, now, self.config.topic, replay_as_long(self._saved))),
                now,
                key,
                None,
            )
        self.writer.roll()
        self.reporter.resynced()
        saved = self._saved.hex() if self._saved is not None else None
        message = (
            f"replay id {saved} is no longer retained ({exc.details()}): landed a resync of "
            f"{len(self.config.entities)} objects; continuing from the tip"
        )
        log.warning(message)
        self.reporter.set_state("STARTING", message)
        self._from_tip = True


def resync_marker(
    entity: str, transaction_key: str, sequence: int, commit_ts: int, channel: str, replay_long: int | None
) -> dict[str, Any]:
    """A GAP_OVERFLOW event for ``entity`` after an expired replay id: the replica is resynced from the org."""
    return overflow_marker(
        entity, transaction_key, sequence, commit_ts, channel, replay_long, "cdc_subscriber/replay-id-expired"
    )
