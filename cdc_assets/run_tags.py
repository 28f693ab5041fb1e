"""The tags on this platform's runs: three a person filters by, the rest hidden from the UI.

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

from collections.abc import Iterable

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


def work_tag(name: str) -> str:
    """The work a run does for an object (reconcile, resync), so no sensor asks for it again meanwhile."""
    return hidden_tag(f"work.{name}")


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
