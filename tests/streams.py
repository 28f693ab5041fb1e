"""Random but valid CDC event streams in the Streaming API (CometD) shape, for property tests.

A stream is what one Salesforce org could emit for a few Accounts and Contacts (the sample objects, with their
compound `BillingAddress`, `Name` and `MailingAddress`). The generator keeps the org's true state of every record,
so each event is one Salesforce could send:

- CREATE and UNDELETE carry every non-empty field; UPDATE carries a few changed fields plus `LastModifiedDate`,
  nulls included (and listed in `nulledFields`); DELETE carries none; one UPDATE may name several records;
- updates and deletes touch live records only, undeletes deleted ones; a few records exist before the stream
  starts (the replica never saw their CREATE);
- gap events (mostly GAP_UPDATE) change a record without saying how;
- changes are grouped in transactions of one or more events (sequence numbers 1..n, one commit timestamp and
  commit number), in commit order: commitTimestamp never decreases (equal ones happen), commitNumber and replayId
  always increase.

An event is a plain dict (`entity, record_ids, change_type, commit_ts` in epoch ms, `commit_number,
transaction_key, sequence_number, replay_id, fields` with component names flattened, None = nulled);
`to_line` renders it as the JSON line a subscriber lands, `from_line` reads one back. `random_stream` is the
seeded generator, `event_streams` the same generator as a hypothesis strategy (it draws its randomness from
hypothesis, so failing streams shrink).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cache
from pathlib import Path

from hypothesis import strategies as st
from settings import SAMPLE

DESCRIBE_DIR = SAMPLE / "describe"
OBJECTS = ("Account", "Contact")
KEY_PREFIX = {"Account": "001", "Contact": "003", "Opportunity": "006"}
START_MS = 1_763_800_000_000
USERS = ("005000000000001AAA", "005000000000002AAA", "005000000000003AAA")
NOT_IN_EVENTS = {"IsDeleted", "SystemModstamp"}
AUDIT = {"CreatedDate", "CreatedById", "LastModifiedDate", "LastModifiedById"}

# Values with the characters that break naive JSON or SQL handling, next to plain ones.
WORDS = (
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Zürich AG",
    "O'Brien & Sons",
    'The "Quoted" Co',
    "back\\slash",
    "日本支社",
    "comma, semi; colon:",
    "Stark",
)
# Text that a parser could mistake for something else; used verbatim.
LITERALS = ("null", "true", "0042", "1e3", '{"City": "x"}', "[1, 2]", "  padded  ")
PICKLISTS = {
    "Industry": ("Energy", "Retail", "Manufacturing", "Banking", "Media"),
    "Rating": ("Hot", "Warm", "Cold"),
    "Salutation": ("Mr.", "Ms.", "Dr.", "Prof."),
    "StageName": ("Prospecting", "Negotiation", "Closed Won", "Closed Lost"),
}
CHANGE_WEIGHTS = {
    "CREATE": 3.0,
    "UPDATE": 5.0,
    "MULTI_UPDATE": 1.0,
    "DELETE": 1.0,
    "UNDELETE": 1.0,
    "GAP_UPDATE": 0.5,
    "GAP_CREATE": 0.1,
    "GAP_DELETE": 0.1,
}


@dataclass(frozen=True)
class FieldMeta:
    name: str
    type: str
    nillable: bool
    parent: str | None  # compound field this is a component of (BillingAddress, Name, ...)

    @property
    def nested_key(self) -> str:
        """The key inside its compound value: BillingCity -> City, FirstName -> FirstName."""
        if self.parent and self.parent.endswith("Address"):
            prefix = self.parent[: -len("Address")]
            if self.name.startswith(prefix):
                return self.name[len(prefix) :]
        return self.name

    @property
    def event_name(self) -> str:
        """The name changedFields/nulledFields use: BillingAddress.City, Name.FirstName, Phone."""
        return f"{self.parent}.{self.nested_key}" if self.parent else self.name


@dataclass(frozen=True)
class SObject:
    """The replicable fields of one object: describe() fields minus compound parents, formulas, IsDeleted,
    SystemModstamp (what events can carry and what the replica stores)."""

    name: str
    fields: tuple[FieldMeta, ...]  # Id first

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.fields]

    @property
    def types(self) -> dict[str, str]:
        return {f.name: f.type for f in self.fields}

    def field(self, name: str) -> FieldMeta:
        return next(f for f in self.fields if f.name == name)

    @property
    def editable(self) -> list[FieldMeta]:
        return [f for f in self.fields if f.name != "Id" and f.name not in AUDIT]


def load_object(path: Path) -> SObject:
    describe = json.loads(path.read_text())
    raw = describe["fields"]
    parents = {f["compoundFieldName"] for f in raw if f.get("compoundFieldName")}
    parents |= {f["name"] for f in raw if f["type"] in ("address", "location")}
    fields = [
        FieldMeta(f["name"], f["type"], bool(f.get("nillable")), f.get("compoundFieldName"))
        for f in raw
        if f["name"] not in parents | NOT_IN_EVENTS and not f.get("calculated")
    ]
    fields.sort(key=lambda f: f.name != "Id")
    return SObject(describe["name"], tuple(fields))


@cache
def sample_objects(describe_dir: Path = DESCRIBE_DIR) -> dict[str, SObject]:
    """Every object described in `describe_dir` (Account, Contact, Opportunity for the sample)."""
    return {p.stem: load_object(p) for p in sorted(describe_dir.glob("*.json"))}


def record_id(entity: str, n: int) -> str:
    """An 18-character id; ids spread over a few layout buckets (the first 13 characters)."""
    return f"{KEY_PREFIX[entity]}{n % 3}{'0' * 8}{n:03d}AAA"


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class _Org:
    """The true state of the org's records, and the values a user would type."""

    def __init__(self, rng: random.Random, objects: dict[str, SObject], n_records: int):
        self.rng, self.objects, self.n_records = rng, objects, n_records
        self.records: dict[str, dict[str, dict]] = {e: {} for e in objects}  # id -> {"fields", "deleted"}
        self.created = dict.fromkeys(objects, 0)

    def new_id(self, entity: str) -> str | None:
        if self.created[entity] >= self.n_records:
            return None
        self.created[entity] += 1
        return record_id(entity, self.created[entity])

    def live(self, entity: str) -> list[str]:
        return [i for i, r in self.records[entity].items() if not r["deleted"]]

    def deleted(self, entity: str) -> list[str]:
        return [i for i, r in self.records[entity].items() if r["deleted"]]

    def value(self, entity: str, f: FieldMeta, now_ms: int):
        rng, t = self.rng, f.type
        if f.name in PICKLISTS:
            return rng.choice(PICKLISTS[f.name])
        if f.name == "AccountId":
            accounts = list(self.records.get("Account", {})) or [record_id("Account", 1)]
            return rng.choice(accounts)
        if t == "reference":
            return rng.choice(USERS)
        if t == "datetime":
            return iso(now_ms)
        if t == "date":
            return (date(1950, 1, 1) + timedelta(days=rng.randint(0, 20_000))).isoformat()
        if t == "boolean":
            return rng.random() < 0.5
        if t == "int":
            return rng.randint(0, 100_000)
        if t in ("double", "currency", "percent"):
            if f.name.endswith("Latitude"):
                return round(rng.uniform(-90, 90), 6)
            if f.name.endswith("Longitude"):
                return round(rng.uniform(-180, 180), 6)
            return round(rng.uniform(-1_000, 5_000_000), 2)
        if t == "email":
            return f"user{rng.randint(1, 999)}@example.com"
        if t == "phone":
            return f"+1 555 {rng.randint(0, 9999):04d}"
        if t == "picklist":
            return rng.choice(("Address", "Zip", "City", "Street"))
        if f.name.endswith("PostalCode"):
            return f"{rng.randint(0, 99_999):05d}"
        if t in ("string", "textarea") and rng.random() < 0.1:
            return rng.choice(LITERALS)
        text = rng.choice(WORDS)
        if t == "textarea" and rng.random() < 0.3:
            text += "\nline two"
        return f"{text} {rng.randint(1, 99)}"

    def full_fields(self, entity: str, now_ms: int) -> dict:
        """A new record: required fields, audit fields, and about half of the optional ones."""
        fields = {}
        for f in self.objects[entity].fields:
            if f.name == "Id":
                continue
            if f.name in AUDIT or not f.nillable or self.rng.random() < 0.5:
                fields[f.name] = self.value(entity, f, now_ms)
        return fields

    def changes(self, entity: str, now_ms: int, current: dict) -> dict:
        """An UPDATE's body: one to three changed fields (nillable ones sometimes nulled) + LastModifiedDate."""
        editable = self.objects[entity].editable
        changed = {}
        for f in self.rng.sample(editable, self.rng.randint(1, min(3, len(editable)))):
            if f.nillable and current.get(f.name) is not None and self.rng.random() < 0.3:
                changed[f.name] = None
            else:
                changed[f.name] = self.value(entity, f, now_ms)
        changed["LastModifiedDate"] = iso(now_ms)
        if self.rng.random() < 0.3:
            changed["LastModifiedById"] = self.rng.choice(USERS)
        return changed

    def non_empty(self, entity: str, rid: str) -> dict:
        return {k: v for k, v in self.records[entity][rid]["fields"].items() if v is not None}


def _as_rng(seed_or_rng: int | random.Random) -> random.Random:
    return seed_or_rng if isinstance(seed_or_rng, random.Random) else random.Random(seed_or_rng)


def random_stream(
    seed_or_rng: int | random.Random,
    n_events: int,
    *,
    n_records: int = 4,
    preexisting: int = 1,
    max_transaction: int = 4,
    gap_weight: float = 1.0,
    objects: dict[str, SObject] | None = None,
    entity_weights: dict[str, float] | None = None,
    start_ms: int = START_MS,
) -> list[dict]:
    """`n_events` distinct events in commit order; at most `n_records` records per object are created.

    `preexisting` more records per object exist before the stream starts (the stream never shows their CREATE);
    `gap_weight` scales how often gap events occur (0: never); `entity_weights` how often each object's
    events occur (default: equally often).
    """
    rng = _as_rng(seed_or_rng)
    objects = objects or {name: sample_objects()[name] for name in OBJECTS}
    org = _Org(rng, objects, n_records + preexisting)
    weights = {k: w * (gap_weight if k.startswith("GAP_") else 1.0) for k, w in CHANGE_WEIGHTS.items()}
    entities = sorted(objects)
    entity_weights = [(entity_weights or {}).get(e, 1.0) for e in entities]
    for entity in entities:
        for _ in range(preexisting):
            rid = org.new_id(entity)
            org.records[entity][rid] = {"fields": org.full_fields(entity, start_ms - 86_400_000), "deleted": False}

    events: list[dict] = []
    ts, commit_number, replay_id, tx = start_ms, 9_000_000, 1_000, 0
    while len(events) < n_events:
        ts += 0 if rng.random() < 0.1 else rng.randint(1, 120_000)
        commit_number += rng.randint(1, 9)
        tx += 1
        key = f"{rng.getrandbits(32):08x}-0000-4000-8000-{tx:012x}"
        size = 1 if rng.random() < 0.6 else rng.randint(2, max_transaction)
        for seq in range(1, min(size, n_events - len(events)) + 1):
            entity = rng.choices(entities, weights=entity_weights)[0]
            change_type, ids, fields = _next_change(org, entity, ts, weights)
            replay_id += rng.randint(1, 7)
            events.append(
                {
                    "entity": entity,
                    "record_ids": ids,
                    "change_type": change_type,
                    "commit_ts": ts,
                    "commit_number": commit_number,
                    "transaction_key": key,
                    "sequence_number": seq,
                    "replay_id": replay_id,
                    "fields": fields,
                }
            )
    return events


def _next_change(org: _Org, entity: str, ts: int, weights: dict[str, float]) -> tuple[str, list[str], dict]:
    """Pick a change Salesforce could send now, apply it to the org's true state, return (type, ids, body)."""
    rng, records = org.rng, org.records[entity]
    live, deleted = org.live(entity), org.deleted(entity)
    room = org.created[entity] < org.n_records
    possible = {
        "CREATE": room,
        "GAP_CREATE": room,
        "UPDATE": bool(live),
        "MULTI_UPDATE": len(live) >= 2,
        "DELETE": bool(live),
        "GAP_UPDATE": bool(live),
        "GAP_DELETE": bool(live),
        "UNDELETE": bool(deleted),
    }
    kinds = [k for k, ok in possible.items() if ok and weights[k] > 0]
    kind = rng.choices(kinds, weights=[weights[k] for k in kinds])[0]

    if kind in ("CREATE", "GAP_CREATE"):
        rid = org.new_id(entity)
        records[rid] = {"fields": org.full_fields(entity, ts), "deleted": False}
        return kind, [rid], dict(records[rid]["fields"]) if kind == "CREATE" else {}
    if kind in ("UPDATE", "MULTI_UPDATE", "GAP_UPDATE"):
        ids = rng.sample(live, rng.randint(2, min(3, len(live)))) if kind == "MULTI_UPDATE" else [rng.choice(live)]
        if kind == "GAP_UPDATE" and len(live) >= 2 and rng.random() < 0.2:
            ids = rng.sample(live, 2)
        changed = org.changes(entity, ts, records[ids[0]]["fields"])
        for rid in ids:
            records[rid]["fields"].update(changed)
        return ("GAP_UPDATE", ids, {}) if kind == "GAP_UPDATE" else ("UPDATE", ids, changed)
    if kind in ("DELETE", "GAP_DELETE"):
        rid = rng.choice(live)
        records[rid]["deleted"] = True
        return kind, [rid], {}
    rid = rng.choice(deleted)  # UNDELETE
    records[rid]["deleted"] = False
    records[rid]["fields"]["LastModifiedDate"] = iso(ts)
    return "UNDELETE", [rid], org.non_empty(entity, rid)


def to_line(event: dict, objects: dict[str, SObject] | None = None) -> str:
    """The event as one landing-zone line: `{"channel", "data": {"schema", "payload", "event"}}`, compound
    components nested under their parent, nulls explicit and listed in `nulledFields`."""
    obj = (objects or sample_objects())[event["entity"]]
    metas = {f.name: f for f in obj.fields}
    body: dict = {}
    changed, nulled = [], []
    for name, value in event["fields"].items():
        f = metas[name]
        if f.parent:
            body.setdefault(f.parent, {})[f.nested_key] = value
        else:
            body[name] = value
        changed.append(f.event_name)
        if value is None:
            nulled.append(f.event_name)
    header = {
        "entityName": event["entity"],
        "recordIds": list(event["record_ids"]),
        "changeType": event["change_type"],
        "changeOrigin": "com/salesforce/api/rest/62.0;client=streams",
        "transactionKey": event["transaction_key"],
        "sequenceNumber": event["sequence_number"],
        "commitTimestamp": event["commit_ts"],
        "commitNumber": event["commit_number"],
        "commitUser": USERS[0],
        "nulledFields": nulled,
        "diffFields": [],
        "changedFields": changed if event["change_type"] == "UPDATE" else [],
    }
    line = {
        "channel": "/data/ChangeEvents",
        "data": {
            "schema": f"schema-{event['entity']}",
            "payload": {"ChangeEventHeader": header, **body},
            "event": {"replayId": event["replay_id"]},
        },
    }
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def from_line(line: str, objects: dict[str, SObject] | None = None) -> dict:
    """The inverse of `to_line`: a CometD JSON line (or just its `data` object) as an event dict."""
    raw = json.loads(line)
    data = raw.get("data", raw)
    payload = dict(data["payload"])
    header = payload.pop("ChangeEventHeader")
    obj = (objects or sample_objects()).get(header["entityName"])
    components = {(f.parent, f.nested_key): f.name for f in obj.fields if f.parent} if obj else {}
    parents = {parent for parent, _ in components}
    fields = {}
    for name, value in payload.items():
        if name in parents and isinstance(value, dict):
            fields.update({components[(name, key)]: v for key, v in value.items()})
        else:
            fields[name] = value
    return {
        "entity": header["entityName"],
        "record_ids": header["recordIds"],
        "change_type": header["changeType"],
        "commit_ts": header["commitTimestamp"],
        "commit_number": header.get("commitNumber", 0),
        "transaction_key": header["transactionKey"],
        "sequence_number": header["sequenceNumber"],
        "replay_id": data["event"]["replayId"],
        "fields": fields,
    }


@st.composite
def event_streams(draw, min_events: int = 1, max_events: int = 30, **options) -> list[dict]:
    """Hypothesis strategy: `random_stream` driven by a hypothesis-controlled random source (shrinks)."""
    n_events = draw(st.integers(min_events, max_events))
    rng = draw(st.randoms(use_true_random=False))
    return random_stream(rng, n_events, **options)
