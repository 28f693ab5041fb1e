"""The platform's names (a leaf module): asset keys, group, pools, metadata entries, run tags.

The tags on this platform's runs: three a person filters by, the rest hidden from the UI.

Shown in the runs list (and offered by its tag filter):
- `cdc/mode`: what the run does to its replicas: apply (landing, close and catch-up runs), reconcile, resync,
  reconcile+resync, poll, changefeed, upkeep;
- `cdc/objects`: the objects it includes, comma-separated (`Account,Contact`; past `OBJECTS_SHOWN` names the
  rest as `+N`);
- `cdc/reason`: why it was asked for, in words (`new landing files`, `Account: reconcile (3 dirty records)`).

Everything else a run carries is for the sensors, which find the runs that did or do a piece of work by tag
(sensors/work.py): one tag per object included (`object_tag`) and per work done (`work_tag`), the landing run's
marker (`TAG_FILES`, also the key of the instance's one-landing-run-at-a-time limit in dagster.yaml), the
transaction a close run applies, the pinned cut (cdc_assets/run_cut.py). They are hidden tags: Dagster keeps any
tag whose key starts with `.dagster/` on the run and in run filters, but neither its GraphQL API nor the UI shows
it, so a runs page lists three tags a run instead of a dozen (a JSON cut among them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import dagster as dg

LANDING_ZONE = dg.AssetKey("landing_zone")
CHANGE_EVENTS_KEY = dg.AssetKey("change_events")
GROUP = "salesforce_cdc"  # all but the histories (cdc_assets/assets.py)
HISTORY_GROUP = "salesforce_history"
EVENTS_PREFIX, REPLICA_PREFIX, CHANGEFEED_PREFIX = "events", "salesforce", "changefeed"


def events_key(name: str) -> dg.AssetKey:
    """`name`'s rows of change_events: what its replica depends on."""
    return dg.AssetKey([EVENTS_PREFIX, f"{name}_events"])


def replica_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([REPLICA_PREFIX, name])


def history_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([HISTORY_GROUP, f"{name}_history"])


def changefeed_key(name: str) -> dg.AssetKey:
    return dg.AssetKey([CHANGEFEED_PREFIX, f"{name}_changefeed"])


def ingest_keys(names: Iterable[str]) -> list[dg.AssetKey]:
    """What one ingest step materializes."""
    return [CHANGE_EVENTS_KEY, *(events_key(n) for n in names)]


CHANGE_EVENTS_POOL = "change_events"


def replica_pool(name: str) -> str:
    """Every step writing (or exporting) `name`'s replica: one slot, a host lock (resources/pool_lock.py)."""
    return f"replica_{name}"


META_DELTA_VERSION = "delta_version"
META_ENTITY_SEQ = "last_ingest_with_rows"
META_TABLE_URI = "table_uri"
META_FIELD_CATALOG = "field_catalog_uri"  # the object's <Object>__fields table (replication/field_catalog.py)
META_FIELDS_EXCLUDED = "fields_excluded"  # describe() fields never replicated, with why (binary ones)
META_APPLIED_THROUGH = "applied_through"  # the replica's checkpoint
META_COMMITTED = "committed"  # whether the apply step committed
META_DIRTY = "dirty_records"
META_RESYNC = "resync_pending"
META_RESYNC_DEFERRED = "resync_deferred_until"  # ISO; "" when the pending resync is due (replication/damaged.py)
META_HELD = "held_transactions"
META_LAG = "lag_seconds"
META_API_CALLS = "api_calls"
META_UNKNOWN_FIELDS = "unknown_field_names"  # in events, unknown to describe()
META_POLL_CURSOR = "poll_cursor"
META_POLL_CURSOR_FIELD = "poll_cursor_field"
META_POLL_NEXT = "poll_next"  # what the next poll reads: the poll sensor's probe (replication/poll/run.py next_poll)
META_FAILED_FILES = "failed_files"
META_HISTORY_VERSIONS = "history_versions"
META_HISTORY_THROUGH = "history_through"
META_FORMULAS_AGE = "formulas_oldest_age_seconds"
META_FORMULAS_MISSING = "formulas_missing"
META_PAUSED, META_LAST_ERROR = "paused", "last_error"

HIDDEN = ".dagster/"  # dagster._core.storage.tags.HIDDEN_TAG_PREFIX: stored and filterable, not shown

TAG_MODE = "cdc/mode"
TAG_OBJECTS = "cdc/objects"
TAG_REASON = "cdc/reason"
VISIBLE = (TAG_MODE, TAG_OBJECTS, TAG_REASON)
TAG_FILES = f"{HIDDEN}cdc.files"  # landing runs: how many new files they were asked for
OBJECTS_SHOWN = 8
REASON_CHARS = 200


def hidden_tag(name: str) -> str:
    return f"{HIDDEN}cdc.{name}"


def object_tag(name: str) -> str:
    """On every run this platform asks for, per object it includes (value "1")."""
    return hidden_tag(f"object.{name}")


def objects_of_tags(tags: Mapping[str, str]) -> list[str]:
    """The objects a run includes, read from its hidden object tags (`object_tag`)."""
    prefix = object_tag("")
    return [key.removeprefix(prefix) for key, value in tags.items() if key.startswith(prefix) and value == "1"]


def work_tag(name: str) -> str:
    """The work a run does for an object (reconcile, resync), so no sensor asks for it again meanwhile."""
    return hidden_tag(f"work.{name}")


def resumed_tag(name: str) -> str:
    return hidden_tag(f"resumed.{name}")


TAG_CUT = hidden_tag("cut")
TAG_CLOSE_SEQ = hidden_tag("close_seq")
TAG_DIRTY = hidden_tag("dirty_records")
TAG_OPERATOR = hidden_tag("operator")  # the action, on runs a person launched from the UI
TAG_UPKEEP = hidden_tag("upkeep")  # the table (an object, or _change_events)


def objects_value(names: Iterable[str]) -> str:
    names = sorted(names)
    shown = names[:OBJECTS_SHOWN]
    rest = len(names) - len(shown)
    return ",".join(shown) + (f",+{rest}" if rest else "")


def run_tags(
    *, mode: str, reason: str, objects: Iterable[str] = (), hidden: dict[str, str] | None = None
) -> dict[str, str]:
    """A run's tags: the three shown (mode, objects, reason) and, hidden, one object tag per object and `hidden`."""
    objects = sorted(set(objects))
    tags = {TAG_MODE: mode, TAG_REASON: reason[:REASON_CHARS]}
    if objects:
        tags[TAG_OBJECTS] = objects_value(objects)
    return {**tags, **{object_tag(n): "1" for n in objects}, **(hidden or {})}
