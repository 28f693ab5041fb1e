"""`replication.yaml`: which Salesforce objects replicate, and how. Every option is a field of a model below, with its
default and meaning; that is the one reference (`python -m replication.config` prints it as the README's tables).

```yaml
options:                        # ReplicationOptions: platform-wide settings
  transaction_close_after: 60
  initial_load: true
  poll_interval: 300            # an ObjectOptions key under `options` is the default for every object
objects:                        # SObjectConfig each: a name, or a mapping
  - Account
  - name: Campaign
    source: poll
    poll_interval: 60           # ... and in an object's entry it overrides that default
```

The file is validated when the definitions load: a key that is not an option (a typo at the top level, under
`options`, in an object) or a value of the wrong type stops loading with an error naming the file, the path of the
key in it (`objects[1].pol_interval`) and the closest option. `describe` paths are relative to the YAML file;
`CDC_CONFIG` names the file (default `replication.yaml`).

A key renamed keeps working under its old name, with a logged warning naming the file, the object and the new key
(`mode: poll` is now `source: poll`).

The models are frozen and are what the code reads (`replication.options.freshness_seconds`, `sobject.poll.overlap`).
A new section is a nested model and one field: in `ReplicationOptions` (platform-wide) and, when objects may
override it, in `ObjectOptions`, which objects inherit from `options` key by key.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from object_schema.describe import DEFAULT_BUCKET_CHARS, ObjectSchema
from object_schema.hashing import SALT_ENV
from replication.api_name import ApiName
from replication.changefeed.config import ChangefeedConfig
from replication.formulas.config import FormulasConfig
from spark_ops.parse import MAX_BATCH_CHANGE_BYTES, MAX_EVENT_BYTES

log = logging.getLogger(__name__)

LOADED_CONFIG_ENV = "CDC_CONFIG_LOADED"  # the text a code location loaded, for the runs it starts (JSON)
# Where an object's rows come from: Change Data Capture events, or polling the org (objects without CDC).
Source = Literal["cdc", "poll"]
CDC_SOURCE, POLL_SOURCE = get_args(Source)
RENAMED_OBJECT_KEYS = {"mode": "source"}  # old key -> new: still read, with a warning (`_renamed_keys`)


class ConfigError(ValueError):
    """replication.yaml is not valid: every problem, each with the file and the path of the key."""


class _Section(BaseModel):
    """A mapping of replication.yaml: unknown keys are errors, values are checked and converted once, then frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True)


class ObjectOptions(_Section):
    """Settings of one object. Under `options` each is the default for every object; an object's entry overrides
    it. The poll keys apply to `source: poll` objects (replication/poll/run.py)."""

    bucket_chars: int = Field(
        DEFAULT_BUCKET_CHARS,
        ge=1,
        le=18,
        description=(
            "Leading Id characters that form the table's layout column `_sf_bucket` (docs/design/contract.md §8): records created "
            "together share a partition."
        ),
    )
    redact_quarantine: bool = Field(
        False,
        description=(
            "Quarantined lines (`_quarantine.raw`) of objects with `hash` or `fields` keep those fields as "
            '"<redacted>" (a line that is not JSON: wholly), so the quarantine holds no hashed or left-out value '
            "in clear; false: raw lines as landed, readable only by those allowed to see the org's data."
        ),
    )
    poll_interval: float = Field(
        300.0, gt=0, description=("Seconds between polls of the object (the `poll_sensor` asks for it once a window).")
    )
    poll_overlap: float = Field(
        300.0, ge=0, description=("Seconds re-read behind the cursor each poll, for rows committed late.")
    )
    hard_delete_check_every: float = Field(
        86400.0,
        ge=0,
        description=(
            "Seconds between Id comparisons with the org, which find records purged from the recycle bin; an initial "
            "load or resync counts as one."
        ),
    )
    poll_max_delete_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description=(
            "Largest share of an object's live records one Id comparison may soft-delete; a comparison that would "
            "delete more is refused (check `poll_hard_deletes`) until a run confirms it (`confirm_deletes`)."
        ),
    )
    poll_rest_max_records: int = Field(
        2000,
        ge=0,
        description=(
            "A delta smaller than this is read with one REST queryAll; a larger one through a Bulk API 2.0 job."
        ),
    )
    poll_page_size: int = Field(
        50_000, gt=0, description=("Records per Bulk API 2.0 result page when polling (one Delta commit each).")
    )
    describe_every: float | None = Field(
        3600.0,
        gt=0,
        description=(
            "Seconds between runs that ask describe() again (the sensor `describe_sensor`, run action "
            "`describe`): fields added in the org (or made readable to the integration user) become columns, "
            "backfilled from the org; fields hidden or deleted are marked. Events that set a field the replica "
            "lacks ask at once. Unset (null): only then, and on a resync. Objects with a `describe` file have none."
        ),
    )
    history: bool = Field(
        False,
        description=(
            "Keep `<Object>__history` beside the replica: one row per version of each record (SCD type 2), written "
            'by the replica\'s own runs (replication/history/; README "History tables"). Turned on for an existing '
            "replica, it is backfilled from change_events."
        ),
    )
    freshness: float | None = Field(
        None,
        gt=0,
        description=(
            "How old a replica's latest materialization may get before Dagster marks it stale (its FreshnessPolicy; "
            "the UI's Freshness), and the threshold of its `freshness` check: seconds, or a duration such as `5m`, "
            "`90s`, `1h`, `1d`. Unset: `freshness_seconds`."
        ),
    )
    # Per-object sections: a nested model and one field (an object's own section is laid over the default's).
    changefeed: ChangefeedConfig | None = Field(
        None,
        description=(
            "The replica's changefeed (replication/changefeed/config.py): a section, or false for none. Under "
            "`options` the default of every object; an object's section overrides it key by key."
        ),
    )

    formulas: FormulasConfig | None = Field(
        None,
        description=(
            "Formula fields as replica columns, refreshed by their own runs (replication/formulas/config.py): a "
            "section, or false for none (the default). Under `options` the default of every object; an object's "
            "section overrides it key by key."
        ),
    )

    @field_validator("freshness", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return duration_seconds(value) if isinstance(value, str) else value

    @field_validator("changefeed", "formulas", mode="before")
    @classmethod
    def _no_section(cls, section: Any) -> Any:
        return None if section is False else section  # `changefeed: false`: set, and no feed


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_seconds(text: str) -> float:
    """`5m`, `90s`, `1.5h`, `1d` or a plain number of seconds, as seconds."""
    text = text.strip().lower()
    unit = DURATION_UNITS.get(text[-1:]) if text else None
    try:
        return float(text[:-1]) * unit if unit else float(text)
    except ValueError:
        raise ValueError(f"not a duration: {text!r} (seconds, or a number with s, m, h or d: 5m)") from None


ORG_EVENT_RETENTION_HOURS = 72.0  # Salesforce re-delivers change events for 72 h, never older ones
MIN_RETENTION_MARGIN_HOURS = 12.0


class UpkeepConfig(_Section):
    """`options.upkeep`: how the jobs `upkeep_replicas` and `upkeep_change_events` keep tables small (README "Table
    upkeep")."""

    schedule: str = Field(
        "17 * * * *",
        description=("Cron schedule of every upkeep job (each runs in its table's pool, never beside a writer of it)."),
    )
    compact: bool = Field(True, description="Compact each table's small files (delta-rs optimize.compact).")
    z_order: bool = Field(
        False,
        description=(
            "Cluster instead of compacting: replicas by Id, change_events by _ingest_seq (optimize.z_order rewrites "
            "every file each time)."
        ),
    )
    vacuum_retention_hours: float = Field(
        168.0,
        ge=1,
        description=(
            "Vacuum deletes files unreferenced for longer than this; it bounds time travel and must exceed the "
            "changefeed's interval (a replica version's Change Data Feed must outlive its export)."
        ),
    )
    change_events_retention_hours: float = Field(
        96.0,
        description=(
            "change_events rows older than this and applied by their replica lose their payload (fields); identities "
            "stay, so dedup and the changefeed stay exact. At least the org's 72 h event retention plus 12 h."
        ),
    )

    landing_after_ingest: Literal["archive", "delete", "keep"] = Field(
        "archive",
        description=(
            "What upkeep does with landing files change_events has ingested: move them to the sibling folder "
            "`<landing>_ingested`, delete them, or keep them listed (every run then lists and checks every file ever "
            "landed)."
        ),
    )
    landing_ledger_hours: float = Field(
        168.0,
        ge=24,
        description=(
            "How long change_events remembers a retired landing file: landed again within this, it is skipped "
            "unread; later, it is read again and its events count as duplicates."
        ),
    )
    landing_archive_days: float | None = Field(
        30.0,
        gt=0,
        description=(
            "Days a retired landing file stays in `<landing>_ingested` (counted from when it was written); older ones "
            "are deleted by upkeep_change_events. The archive holds every value the org sent, in clear: keep it no "
            "longer than the org's data may be kept. null: for ever."
        ),
    )
    quarantine_days: float | None = Field(
        90.0,
        gt=0,
        description=(
            "Days an acknowledged `_quarantine` row is kept (from when it was quarantined); older acknowledged rows "
            "are deleted by upkeep_change_events and their files vacuumed after `vacuum_retention_hours`. Rows not "
            "acknowledged are never deleted (quarantine_empty fails while they wait). null: for ever."
        ),
    )

    @field_validator("change_events_retention_hours")
    @classmethod
    def _past_redelivery(cls, hours: float) -> float:
        least = ORG_EVENT_RETENTION_HOURS + MIN_RETENTION_MARGIN_HOURS
        if hours < least:
            raise ValueError(
                f"must be at least {least:g} (Salesforce re-delivers events for "
                f"{ORG_EVENT_RETENTION_HOURS:g} h; a payload trimmed before that could be needed again)"
            )
        return hours


class ReplicationOptions(ObjectOptions):
    """`options`: platform-wide settings, and the default of every object setting (ObjectOptions)."""

    transaction_close_after: float = Field(
        60.0,
        ge=0,
        description=("Seconds without a newer event before the newest transaction counts as closed and is applied."),
    )
    initial_load: bool = Field(
        True,
        description=(
            "An object's first run loads it fully through Bulk API 2.0 (needs the org); false: replicas start empty "
            "and follow the events."
        ),
    )
    bulk_page_size: int = Field(
        50_000, gt=0, description=("Records per Bulk API 2.0 result page in a resync or initial load (maxRecords).")
    )
    resync_batch_records: int = Field(
        250_000,
        gt=0,
        description=(
            "Records a resync or initial load stages per commit (replication/snapshot.py): bounds its memory, and a "
            "killed run continues its Bulk job from the last batch staged."
        ),
    )
    bulk_parallel_pages: int = Field(
        2,
        ge=1,
        description=(
            "Result pages of a resync or initial load downloaded at once, where the org offers parallel result pages "
            "(API 58.0+; their size is the org's, not bulk_page_size); 1: one page at a time, with locators."
        ),
    )
    max_ingest_batch_bytes: int = Field(
        128 * 1024 * 1024,
        gt=0,
        description=(
            "Bytes of landing text ingested per change_events commit, a .gz file counted inflated (its gzip "
            "trailer): bounds a run's memory on a backlog."
        ),
    )
    max_ingest_batch_change_bytes: int = Field(
        MAX_BATCH_CHANGE_BYTES,
        ge=MAX_EVENT_BYTES,
        description=(
            "Bytes of change rows one ingest batch may explode into (an event's record ids times its fields); the "
            "lines past it are taken as overflows of their object (a full resync): bounds a run's memory against "
            "lines that name thousands of records each."
        ),
    )
    max_line_bytes: int = Field(
        8 * 1024 * 1024,
        gt=0,
        description=("A landing line longer than this many bytes (UTF-8) is quarantined on its own."),
    )
    retry_backoff_seconds: float = Field(
        30.0,
        ge=0,
        description=(
            "First wait before a failed run's work is requested again; doubles with each failure (sensors/work.py)."
        ),
    )
    retry_backoff_max_seconds: float = Field(
        600.0, ge=0, description=("The longest wait between two requests of a failed run's work.")
    )
    poll_objects_per_run: int = Field(
        50,
        gt=0,
        description=(
            "Polled objects one poll run carries at most: the poll sensor asks for one run per cycle with every "
            "object due, split into runs of this many (their steps run one after the other in the run's process)."
        ),
    )
    objects_per_run: int = Field(
        50,
        gt=0,
        description=(
            "Objects one describe or formula refresh run carries at most: each of their sensors asks for one run "
            "per cycle with every object due, split into runs of this many (poll runs: `poll_objects_per_run`)."
        ),
    )
    api_budget_reserve: float = Field(
        0.1,
        ge=0,
        le=1,
        description=(
            "Share of the org's daily API requests kept free: reconcile, resync and poll runs hold back below it."
        ),
    )
    damaged_resync_every: float = Field(
        3600.0,
        ge=0,
        description=(
            "Seconds: a resync that only damaged landing files asked for (a truncated gzip, a line that is not "
            "UTF-8: replication/damaged.py) runs at most once per this per object; until then it stays pending and "
            "the check no_pending_resync warns, naming the files and when it runs. An overflow from the org is "
            "never delayed."
        ),
    )
    subscriber_max_lag_seconds: float = Field(
        300.0,
        gt=0,
        description=("The check subscriber_stream_healthy fails when the CDC subscriber lags more than this."),
    )
    dirty_threshold_seconds: float = Field(
        15 * 60.0,
        ge=0,
        description=("The check no_stale_dirty fails when a record has awaited reconciliation longer than this."),
    )
    freshness_seconds: float = Field(
        3600.0,
        gt=0,
        description=(
            "The default of `freshness` (seconds): the check freshness fails when a replica's newest applied change "
            "is older than this (a quiet org trips it too)."
        ),
    )
    # Platform-wide sections go here as a nested model and one field.
    upkeep: UpkeepConfig = Field(
        default_factory=lambda: UpkeepConfig(),
        description=(
            "Table upkeep (replication/upkeep/): compaction, vacuum, change_events retention, and how long the landing "
            "archive and acknowledged quarantine rows are kept, on a schedule."
        ),
    )


class FieldSelection(_Section):
    """`fields`: which of an object's fields replicate (fewer columns, smaller Bulk and REST payloads)."""

    include: tuple[ApiName, ...] | None = Field(
        None,
        description=(
            "Only these fields (plus Id and the record's position field), e.g. [Name, Industry]; a compound name "
            "(BillingAddress) stands for its parts."
        ),
    )
    exclude: tuple[ApiName, ...] = Field((), description="Every field but these (never Id or the position field).")

    @model_validator(mode="after")
    def _one_of(self) -> FieldSelection:
        if self.include is not None and self.exclude:
            raise ValueError("give `include` or `exclude`, not both")
        return self


@dataclass(frozen=True)
class PollOptions:
    """How a `source: poll` object is polled (seconds; see replication/poll/run.py): its ObjectOptions poll keys."""

    interval: float
    overlap: float
    hard_delete_check_every: float
    rest_max_records: int  # a delta below this many rows is read with one REST query, else Bulk API 2.0
    page_size: int  # Bulk API 2.0 result page (one Delta commit each)
    max_delete_share: float = 0.05  # an Id comparison deleting a larger share of the live records is refused


class SObjectConfig(ObjectOptions):
    """An entry of `objects`: a name alone, or a mapping with the name and any object settings."""

    name: ApiName = Field(description="The sObject API name, e.g. Account.")
    describe_path: Path | None = Field(
        None,
        alias="describe",
        description=("A describe() JSON file to use instead of asking the org (relative to the YAML file)."),
    )
    source: Source = Field(
        CDC_SOURCE,
        validation_alias=AliasChoices("source", "mode"),  # its old name (RENAMED_OBJECT_KEYS)
        description=(
            "cdc: follow Change Data Capture events; poll: read records changed since a cursor (objects without CDC). "
            "Formerly `mode` (still read, with a warning)."
        ),
    )
    field_selection: FieldSelection | None = Field(
        None,
        alias="fields",
        description=(
            'Which fields replicate: {include: [...]} or {exclude: [...]}; default all (README "Fields and hashing").'
        ),
    )
    hashed: tuple[ApiName, ...] = Field(
        (),
        alias="hash",
        description=(
            "Text fields stored as hex SHA-256 of CDC_HASH_SALT + value on every path (e.g. [Email, Phone]); "
            "CDC_HASH_SALT must be set."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _name_alone(cls, entry: Any) -> Any:
        return {"name": entry} if isinstance(entry, str) else entry

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, entry: Any, info: ValidationInfo) -> Any:
        """An old key name is read as its new one (the field's alias), with a warning; both at once is an error."""
        if not isinstance(entry, dict):
            return entry
        for old, new in RENAMED_OBJECT_KEYS.items():
            if old not in entry:
                continue
            if new in entry:
                raise ValueError(f"`{old}` is the old name of `{new}`: give `{new}` only")
            path = (info.context or {}).get("path", "replication.yaml")
            log.warning(
                "%s: object %s: `%s` is deprecated, rename it to `%s` (`%s: %s`)",
                path,
                entry.get("name", "?"),
                old,
                new,
                new,
                entry[old],
            )
        return entry

    @property
    def poll(self) -> PollOptions:
        return PollOptions(
            interval=self.poll_interval,
            overlap=self.poll_overlap,
            hard_delete_check_every=self.hard_delete_check_every,
            rest_max_records=self.poll_rest_max_records,
            page_size=self.poll_page_size,
            max_delete_share=self.poll_max_delete_share,
        )

    def load_describe(self) -> dict | None:
        return json.loads(self.describe_path.read_text()) if self.describe_path else None

    def schema_from_file(self) -> ObjectSchema | None:
        describe = self.load_describe()
        return self.schema_of(describe) if describe else None

    def schema_of(self, describe: dict) -> ObjectSchema:
        """The replica schema of this object from its describe(): the fields it selects, the ones it hashes, and its
        formula columns (`formulas`)."""
        selection = self.field_selection or FieldSelection()
        try:
            schema = ObjectSchema.from_describe(
                describe,
                bucket_chars=self.bucket_chars,
                include=selection.include,
                exclude=selection.exclude,
                hashed=self.hashed,
                redact_quarantine=self.redact_quarantine,
            )
            return schema.with_formulas(self.formulas.fields) if self.formulas else schema
        except ValueError as e:
            raise ConfigError(f"replication.yaml: {e}") from None


class ReplicationConfig(_Section):
    """The whole file."""

    options: ReplicationOptions = Field(
        default_factory=ReplicationOptions, description=("Platform-wide settings and object defaults.")
    )
    objects: tuple[SObjectConfig, ...] = Field((), description="The objects that replicate, each once.")

    @field_validator("options", mode="before")
    @classmethod
    def _empty_options(cls, options: Any) -> Any:
        return {} if options is None else options  # `options:` with nothing under it

    @field_validator("objects", mode="before")
    @classmethod
    def _empty_objects(cls, objects: Any) -> Any:
        return () if objects is None else objects

    @field_validator("objects")
    @classmethod
    def _inherit_and_check(cls, objects: tuple[SObjectConfig, ...], info: ValidationInfo) -> tuple[SObjectConfig, ...]:
        names = [o.name for o in objects]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"listed more than once: {', '.join(twice)}")
        options = info.data.get("options")  # absent when `options` itself is invalid (reported on its own)
        if options is None:
            return objects
        return tuple(_inherit(o, options) for o in objects)

    @model_validator(mode="after")
    def _salt_for_hashes(self) -> ReplicationConfig:
        hashing = [o.name for o in self.objects if o.hashed]
        if hashing and not os.environ.get(SALT_ENV):
            raise ValueError(
                f"{', '.join(hashing)} hash fields (`hash:`) but {SALT_ENV} is not set: set it to a "
                "long random secret, the same for every process of the platform, before loading"
            )
        return self

    @property
    def names(self) -> list[str]:
        return [o.name for o in self.objects]

    def object(self, name: str) -> SObjectConfig:
        return next(o for o in self.objects if o.name == name)

    def unknown(self, names: list[str]) -> str | None:
        """What is wrong with `names` as a person's choice of objects (an operator job's config): None when each
        is an object of this file, else a sentence naming the strangers and the objects there are."""
        strangers = sorted(set(names) - set(self.names))
        if not strangers:
            return None
        return f"not in replication.yaml: {', '.join(strangers)} (its objects: {', '.join(self.names)})"

    def freshness_of(self, sobject: SObjectConfig) -> float:
        """Seconds a replica's latest materialization may age: its `freshness`, else `freshness_seconds`."""
        return sobject.freshness or self.options.freshness_seconds

    @property
    def transaction_close_after(self) -> float:
        return self.options.transaction_close_after

    @property
    def initial_load(self) -> bool:
        return self.options.initial_load


def _inherit(sobject: SObjectConfig, options: ReplicationOptions) -> SObjectConfig:
    """`sobject` with every setting it leaves unset taken from `options`; its own changefeed section is laid
    over the default's key by key (`changefeed: false` is None, set: no feed whatever the default)."""
    update = {k: getattr(options, k) for k in ObjectOptions.model_fields if k not in sobject.model_fields_set}
    if sobject.changefeed is not None:
        update["changefeed"] = sobject.changefeed.over(options.changefeed)
    if sobject.formulas is not None:
        update["formulas"] = sobject.formulas.over(options.formulas)
    return sobject.model_copy(update=update)


def _located(sobject: SObjectConfig, base: Path) -> SObjectConfig:
    """`sobject` with its file paths resolved against the YAML file's folder."""
    update: dict[str, Any] = {}
    if sobject.describe_path:
        update["describe_path"] = (base / sobject.describe_path).resolve()
    if sobject.changefeed:
        update["changefeed"] = sobject.changefeed.located(base)
    return sobject.model_copy(update=update)


def config_path(path: str | Path | None = None) -> Path:
    """The file meant: `path`, else CDC_CONFIG, else replication.yaml (absolute)."""
    return Path(path or os.environ.get("CDC_CONFIG", "replication.yaml")).resolve()


def load_config(path: str | Path | None = None) -> ReplicationConfig:
    """The validated config in `path` (default: CDC_CONFIG, else replication.yaml); ConfigError says what is wrong."""
    path = config_path(path)
    return parse_config(path.read_text(), path)


@dataclass(frozen=True)
class LoadedConfig:
    """The configuration a code location loaded: the file, its text then, and the validated model."""

    path: Path
    text: str
    config: ReplicationConfig


def load_location_config(path: str | Path | None = None) -> LoadedConfig:
    """The config of a code location and of every run it starts: the file as the location read it when it loaded.

    Dagster starts each run in a new process that imports the definitions again (the code server spawns it, with
    the server's environment). Reading replication.yaml there would give runs whatever the file holds by then,
    not what the location loaded: a typo saved before the reload would fail them with only "Could not load job
    definition", a valid edit would run jobs the UI had never shown. So the location keeps the text it validated in
    its own environment (`LOADED_CONFIG_ENV`), which the processes it spawns inherit and use instead of the
    file. Reloading the location starts a new server from a clean environment, which reads the file again (and
    shows a bad file's error in the reload dialog). Only the loading process's own children (run workers) take the
    text, never a process further down (a `dagster dev` started by something that imported the definitions must
    still read the file on reload). `sensors/config.py` reports a file edited since.
    """
    path = config_path(path)
    frozen = json.loads(os.environ.get(LOADED_CONFIG_ENV) or "null")
    if frozen is not None and frozen["path"] == str(path) and frozen.get("pid") in (os.getpid(), os.getppid()):
        return LoadedConfig(path, frozen["text"], parse_config(frozen["text"], path))
    loaded = read_config(path)
    os.environ[LOADED_CONFIG_ENV] = json.dumps({"path": str(path), "text": loaded.text, "pid": os.getpid()})
    return loaded


def read_config(path: str | Path | None = None) -> LoadedConfig:
    """The file as it is now, validated (ConfigError says what is wrong)."""
    path = config_path(path)
    text = path.read_text()
    return LoadedConfig(path, text, parse_config(text, path))


def parse_config(text: str, path: Path) -> ReplicationConfig:
    """The validated config in `text`, read from `path` (errors name it; describe paths are relative to it)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    try:
        config = ReplicationConfig.model_validate({} if raw is None else raw, context={"path": path})
    except ValidationError as e:
        raise ConfigError(describe_errors(path, e)) from None
    return config.model_copy(update={"objects": tuple(_located(o, path.parent) for o in config.objects)})


def describe_errors(path: Path, error: ValidationError) -> str:
    """One line per problem: `<file>: objects[1].pol_interval: unknown key (did you mean poll_interval?)`."""
    lines = [f"{path}: {error.error_count()} problem(s) in the replication config (options: replication/config.py)"]
    for e in error.errors():
        loc = list(e["loc"])
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"{path}: {where}: unknown key{_did_you_mean(loc)}")
        else:
            lines.append(f"{path}: {where}: {e['msg']} (got {e['input']!r})")
    return "\n".join(lines)


def _did_you_mean(loc: list) -> str:
    """The closest option name at the misspelled key's level, else all of them."""
    model: type[BaseModel] = ReplicationConfig
    for part in loc[:-1]:
        if isinstance(part, str):  # a key (an int is an index in `objects`)
            field = next(f for name, f in model.model_fields.items() if part in (name, f.alias))
            model = _sections(field.annotation)[0]
    known = [f.alias or name for name, f in model.model_fields.items()]
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else f"; known keys: {', '.join(sorted(known))}"


def reference() -> str:
    """Every option as Markdown tables (key, default, meaning) from the models' fields: the README's reference."""
    tables = [
        ("`options`: platform-wide", _own_fields(ReplicationOptions, ObjectOptions)),
        ("`options` (the default for every object) or an entry of `objects` (that object)", ObjectOptions.model_fields),
        ("an entry of `objects` (or just its name)", _own_fields(SObjectConfig, ObjectOptions)),
    ]
    out = []
    while tables:
        title, fields = tables.pop(0)
        out += [f"Under {title}:", "", "| Key | Default | Meaning |", "|---|---|---|"]
        for name, f in fields.items():
            value = None if f.is_required() else f.get_default(call_default_factory=True)
            default = (
                "required"
                if f.is_required()
                else "a section"
                if isinstance(value, BaseModel)
                else f"`{json.dumps(value)}`"
            )
            out.append(f"| `{f.alias or name}` | {default} | {f.description} |")
            tables += [
                (f"`{f.alias or name}` (a section)", section.model_fields) for section in _sections(f.annotation)
            ]
        out.append("")
    return "\n".join(out)


def _own_fields(model: type[BaseModel], base: type[BaseModel]) -> dict:
    return {k: f for k, f in model.model_fields.items() if k not in base.model_fields}


def _sections(annotation: Any) -> list[type[BaseModel]]:
    """The models nested in a field's type (`Section`, `Section | None`): their keys get a table of their own."""
    if isinstance(annotation, type):
        return [annotation] if issubclass(annotation, BaseModel) else []
    return [m for arg in get_args(annotation) for m in _sections(arg)]


if __name__ == "__main__":
    print(reference(), end="")
