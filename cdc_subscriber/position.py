"""The subscriber's durable position: the replay id of the last event that is safely in the landing zone.

One small JSON file per topic, replaced atomically (``resources/storage.py``: on a local disk write, fsync, rename,
fsync the folder; on an object store one upload), so the state folder may be a local path or an object-store URI
(``s3://bucket/landing-subscriber``), e.g. for a subscriber that a supervisor may restart on another machine.
It is written only after the landing file holding that event has been renamed into the landing zone, so after a
crash the stream resumes at or before the first event that did not land: events may land twice (dedup absorbs
them), never zero times.

The replay id is opaque: it is kept as the exact bytes the Pub/Sub API gave (hex) and sent back unchanged to resume;
nothing here orders or interprets it. ``replay_int`` is only a display form, the CometD ``replayId`` long, present
when the id is 8 bytes (Salesforce's form today).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from cdc_subscriber.proto import replay_as_long
from resources.storage import Folder, is_uri, join

TOPIC = re.compile(r"(?:/[A-Za-z0-9_]+)+")  # /data/ChangeEvents, /data/ns__Invoice__ChangeEvent, /event/X__e


def topic_slug(topic: str) -> str:
    """A topic in file names (positions, status, dead letters, spool), one slug per topic and readable:
    ``/data/ns__Obj__ChangeEvent`` -> ``data.ns__Obj__ChangeEvent``. Names keep their underscores (a slug that
    folded ``__`` into ``_`` would give ``/data/ns_Obj__ChangeEvent`` the same files) and ``/`` becomes ``.``, which
    no topic holds (``TOPIC``), so two topics never share a slug."""
    if not TOPIC.fullmatch(topic):
        raise ValueError(
            f"{topic!r} is not a Pub/Sub API topic name (/data/ChangeEvents, /data/<Object>ChangeEvent, "
            "/data/<Channel>__chn, /event/<Event>__e)"
        )
    return topic[1:].replace("/", ".")


def state_file(state_dir: str | Path, name: str) -> Path | str:
    """Where ``name`` lives in the state folder: a Path on a local disk, a URI string on an object store."""
    return join(state_dir, name) if is_uri(state_dir) else Path(state_dir) / name


class PositionStore:
    def __init__(self, state_dir: str | Path, topic: str):
        self.folder, self.name = Folder(state_dir), f"position-{topic_slug(topic)}.json"
        self.path = state_file(state_dir, self.name)
        self.topic = topic

    def load(self) -> bytes | None:
        text = self.folder.read_text(self.name)
        return None if text is None else bytes.fromhex(json.loads(text)["replay_id"])

    def save(self, replay_id: bytes) -> None:
        body = {
            "topic": self.topic,
            "replay_id": replay_id.hex(),
            "replay_int": replay_as_long(replay_id),
            "saved_at": dt.datetime.now(dt.UTC).isoformat(),
        }
        self.folder.write_atomically(self.name, json.dumps(body))
