"""The Delta warehouse: every table the platform writes, through delta-rs (no JVM jars needed).

Tables live at `<root>/<name>`: replicas at `<root>/Account`, change events at `<root>/_change_events`, quarantine
at `<root>/_quarantine` (docs/design/contract.md §8). `root` is a local path by default or an object-store URI, with
delta-rs's own storage options (README "Dagster conventions": why not dagster-deltalake).

Checkpoints live in the data (docs/design/contract.md §5). Every commit carries:
- **app transactions** (`txn` actions): `dt.transaction_version(app_id)` answers "did a commit already ingest this
  file / apply through this position?" from the table snapshot alone, even after log checkpoints;
- **custom commit metadata** under one key per table kind (JSON), for state a re-run needs (held transactions,
  pending resync, newest event; typed in `replication/state.py`).
Either the data and its checkpoint commit together, or neither does.

**Finding the state** (`commit_state`): a commit that stores state under `key` also carries the app transaction
`cdc_state.<key>` whose version is the Delta version of that very commit (the writer commits against the snapshot
`read` it read its state from, so the commit is `read.version() + 1`, or 0 when it creates the table). A reader
asks the snapshot for that version (app transactions survive log checkpoints) and reads that one commit's JSON
from `_delta_log`, whatever other writers (OPTIMIZE, VACUUM, table properties) committed since: no window of
recent commits to fall out of. If delta-rs retried the commit past a foreign commit that did not conflict, the
state is in the first commit after it that carries `key`. A table whose commit of that version has left
`_delta_log` (log retention) is read from its newest `HISTORY_SCAN` commits, with a warning.

**One writer per table, enforced.** A writer reads its checkpoint from a snapshot and must commit against *that*
snapshot (`read=`), never against a table reloaded just before the commit. delta-rs then checks every commit made
since the snapshot and rejects ours when one of them carries an app transaction id ours carries too (every replica
commit carries `apply`, every change_events commit `change_events`) or, for a merge or overwrite, touched data
ours read. So when two runs apply to the same replica (or ingest into change_events) from the same starting
version, the second commit fails with `ConcurrentWriteError` and the table stays as the first writer left it:
nothing is applied twice. Dagster pools with one slot (README) keep this from happening; this is what makes it
safe when it does. A writer that found no table creates it with `mode="error"`: a table someone else created
in the meantime fails it the same way. All of this rests on the store refusing a second commit file of one version:
on an object store a conditional put, which `setup_for_execution` verifies before a run writes
(`resources/commit_safety.py`).

**Change Data Feed on replicas.** A replica (a table whose name does not start with `_`) is created with
`delta.enableChangeDataFeed=true`, so every merge and overwrite also writes its change rows (delta-rs `load_cdf`),
which the changefeeds and history tables read. The property survives overwrites.

**A protocol every reader reads.** Before committing against a snapshot, a writer checks that the table's protocol
is still inside the allow-list of resources/delta_protocol.py (what DuckDB, polars, Spark and Trino read and
delta-rs writes) and refuses it otherwise: someone else turned a feature on.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Schema, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.table import TableMerger
from deltalake.transaction import AddAction, create_table_with_add_actions
from pydantic import Field

from resources.commit_safety import ensure_safe_commits
from resources.delta_protocol import ensure_readable, ensure_supported
from resources.deployment import DeploymentOwned
from resources.storage import filesystem

log = logging.getLogger(__name__)

CHANGE_EVENTS = "_change_events"
QUARANTINE = "_quarantine"
HISTORY_SCAN = 50  # commits searched backwards for state whose located commit has left _delta_log
STATE_APP_PREFIX = "cdc_state."
# A log checkpoint every this many commits: loading a table then replays at most this many JSON commits. A run
# loads each table several times; measured at 90 commits, one load took 65 ms without a checkpoint, 6 ms with.
CHECKPOINT_EVERY = 10
CHANGE_FEED = "delta.enableChangeDataFeed"


def table_files(table: DeltaTable) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem holding the table's files and the table's root in it, for readers of its Parquet
    files (arrow_dataset, resources/delta_changes.py), which apply no reader feature (deletion vectors, column
    mapping, ...): a table that needs one is refused, saying what to do (resources/delta_protocol.py)."""
    ensure_readable(table, table.table_uri.removeprefix("file://").rstrip("/"))
    return filesystem(table.table_uri.removeprefix("file://"))


def arrow_dataset(table: DeltaTable, *, prune=None) -> ds.Dataset:
    """The snapshot's rows as a pyarrow dataset over its files, without delta-rs' filesystem (module docstring).

    `prune`: a `file_pruning_predicate` for `file_uris` (tuple filters or SQL) naming the files worth opening.
    """
    fs, base = table_files(table)
    schema = pa.schema(table.schema().to_arrow())
    partition_columns = table.metadata().partition_columns
    partitioning = (
        ds.partitioning(pa.schema([schema.field(c) for c in partition_columns]), flavor="hive")
        if partition_columns
        else None
    )
    files = table.file_uris(file_pruning_predicate=prune or None)
    paths = [f if "://" not in f else pafs.FileSystem.from_uri(f)[1] for f in files]
    return ds.dataset(
        paths, schema=schema, format="parquet", filesystem=fs, partitioning=partitioning, partition_base_dir=base
    )


def read_table(
    table: DeltaTable, *, columns: Sequence[str] | None = None, filter: ds.Expression | None = None, prune=None
) -> pa.Table:
    """The snapshot's rows (matching `filter`, only `columns`) as one Arrow table, through `arrow_dataset`."""
    return arrow_dataset(table, prune=prune).to_table(columns=list(columns) if columns else None, filter=filter)


TXN_RETENTION = "delta.setTransactionRetentionDuration"
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(\w+?)s?\s*$", re.IGNORECASE)
_UNIT_MS = {
    "millisecond": 1,
    "second": 1000,
    "minute": 60_000,
    "hour": 3_600_000,
    "day": 86_400_000,
    "week": 604_800_000,
}


def txn_retention_ms(table: DeltaTable) -> int | None:
    """The table's `delta.setTransactionRetentionDuration` in ms (`interval 168 hours`), None when unset."""
    value = table.metadata().configuration.get(TXN_RETENTION)
    if value is None:
        return None
    match = _INTERVAL.match(value)
    if match is None or match.group(2).lower() not in _UNIT_MS:
        raise ValueError(f"Delta table {table.table_uri}: {TXN_RETENTION}={value!r} is not 'interval <n> <unit>'")
    return int(match.group(1)) * _UNIT_MS[match.group(2).lower()]


class ConcurrentWriteError(RuntimeError):
    """Another writer committed to a table after this writer read its checkpoint: this commit was rejected."""


def state_app(key: str) -> str:
    """The app transaction locating the newest commit that stored state under `key` (module docstring)."""
    return STATE_APP_PREFIX + key


def next_version(read: DeltaTable | None) -> int:
    """The version a commit against snapshot `read` gets (None: it creates the table)."""
    return read.version() + 1 if read is not None else 0


def _sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def merge_predicate(
    key_column: str | Sequence[str], partition_column: str | None = None, partition_values: Iterable[str] = ()
) -> str:
    """A merge's predicate (target `t`, source `s`): the key columns equal, within the partitions named.

    delta-rs prunes files only for partition values written as literals in the predicate (docs/design/contract.md
    §8: merge cost follows the change), so the touched partitions are spelled out and the merge rewrites their
    files, not the table's. No values: no partition bound.
    """
    keys = [key_column] if isinstance(key_column, str) else list(key_column)
    predicate = " AND ".join(f"t.{k} = s.{k}" for k in keys)
    values = sorted(set(partition_values))
    if values:
        predicate = f"t.{partition_column} IN ({', '.join(_sql_literal(v) for v in values)}) AND {predicate}"
    return predicate


def table_configuration(name: str) -> dict[str, str] | None:
    """Table properties a new table gets: replicas (no leading `_`) keep a Change Data Feed."""
    return None if name.startswith("_") else {CHANGE_FEED: "true"}


def aligned_arrow(rows: pa.Table, target: pa.Schema) -> pa.Table:
    """`rows` with exactly `target`'s columns and types (missing columns null; string views cast to strings)."""
    cols = [
        rows[f.name].cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type) for f in target
    ]
    return pa.Table.from_arrays(cols, schema=target)


def safe_cast(values: pa.Array, target: pa.DataType) -> pa.Array:
    """`values` as `target` where they convert (a number's text), null where they do not (text in a number): how
    rows written before a column's type changed (replication/retype.py) read in the new type."""
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if not pa.types.is_string(values.type):
            values = values.cast(pa.string())
        return pa.array([_cast_one(v, target) for v in values.to_pylist()], target)


def _cast_one(value: str | None, target: pa.DataType):
    try:
        return pa.scalar(value).cast(target).as_py() if value is not None else None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


class DeltaWarehouse(DeploymentOwned):
    """Delta tables under one root (a path, or an s3:// / az:// / gs:// URI)."""

    DEPLOYMENT_FIELDS = frozenset({"root", "storage_options"})  # where the tables are (resources/deployment.py)

    root: str = Field(description="Local path or object-store URI holding one Delta table per object.")
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "delta-rs storage options for an object-store root, under delta-rs's own keys (AWS_REGION, "
            "AZURE_STORAGE_ACCOUNT_NAME, GOOGLE_SERVICE_ACCOUNT, ...). Leave credentials to the environment variables "
            "delta-rs reads itself (AWS_ACCESS_KEY_ID, AZURE_STORAGE_ACCOUNT_KEY, ...), not the run config."
        ),
    )

    merge_streamed: bool = Field(
        default=True,
        description=(
            "delta-rs merge `streamed_exec`: stream the source rows instead of collecting them first (delta-rs's "
            "default; the source is one run's changed rows)."
        ),
    )
    merge_memory_bytes: int | None = Field(
        default=None,
        description=(
            "delta-rs merge `max_spill_size`: the memory a merge's query may hold before it spills to disk (in the "
            "process's TMPDIR). None: no bound, delta-rs's default. A bound can hang a merge (delta-rs#4614): see "
            "the figures in bench/RESULTS.md before setting one."
        ),
    )
    merge_row_group_rows: int | None = Field(
        default=1024,
        description=(
            "Rows a Parquet row group of a merge's rewritten files holds at most (delta-rs WriterProperties "
            "`max_row_group_size`). A merge keeps a file open per partition it rewrites and holds each one's "
            "current row group unencoded: smaller groups hold less (a merge rewriting every partition of a 10M-row "
            "replica: 7.8 GB peak at 1,024 rows, 9.4 GB at delta-rs's default; bench/RESULTS.md). None: delta-rs's "
            "default."
        ),
    )
    merge_spill_bytes: int | None = Field(
        default=None,
        description="delta-rs merge `max_temp_directory_size`: the disk a merge may spill to (None: delta-rs's default).",
    )

    def uri(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def _merger(self, read: DeltaTable, data: pa.Table, predicate: str, properties: CommitProperties) -> TableMerger:
        """A merge of `data` (alias `s`) into `read` (alias `t`) with the warehouse's memory settings: every merge
        the platform makes goes through here."""
        return read.merge(
            data,
            predicate=predicate,
            source_alias="s",
            target_alias="t",
            merge_schema=True,
            streamed_exec=self.merge_streamed,
            max_spill_size=self.merge_memory_bytes,
            max_temp_directory_size=self.merge_spill_bytes,
            writer_properties=(
                WriterProperties(max_row_group_size=self.merge_row_group_rows) if self.merge_row_group_rows else None
            ),
            commit_properties=properties,
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Before a run writes: on an object store, refuse settings or a store that would let two writers commit
        the same version (resources/commit_safety.py)."""
        ensure_safe_commits(self.root, self._options())

    def _options(self) -> dict[str, str]:
        return dict(self.storage_options)

    def table(self, name: str) -> DeltaTable | None:
        """The table's latest snapshot, or None if it does not exist yet."""
        try:
            return DeltaTable(self.uri(name), storage_options=self._options())
        except TableNotFoundError:
            return None

    def reloaded(self, name: str) -> DeltaTable:
        """The latest snapshot of a table this run has just read or written, so one that exists."""
        table = self.table(name)
        assert table is not None, f"Delta table {self.uri(name)} vanished while this run was using it"
        return table

    def exists(self, name: str) -> bool:
        """Whether the table exists, without loading its log (a load costs ~0.1 s; a sensor asks for every object)."""
        return DeltaTable.is_deltatable(self.uri(name), storage_options=self._options())

    def read(
        self,
        table: DeltaTable,
        *,
        filter: ds.Expression | None = None,
        partitions=None,
        prune=None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """Rows of a snapshot as Arrow matching `filter`, from the files that `partitions` and `prune` leave.

        `prune`: `(column, op, value)` bounds on data columns that every wanted row meets; files whose min/max
        statistics in the Delta log rule them out are never opened. (An append-only table such as change_events
        gains files with every run: without this, each read opened every one of them.)
        """
        return read_table(table, filter=filter, columns=columns, prune=[*(partitions or []), *(prune or [])] or None)

    def read_keys(self, table: DeltaTable, *, key_column: str, keys: Sequence[str], partitions=None) -> pa.Table:
        """Rows whose `key_column` is in `keys`, from the files `partitions` leaves, streamed batch by batch.

        Memory holds the matches and one batch, not the pruned partitions (a spread-out change can name most
        partitions of a large table). The key filter runs on each batch after a cast: a pushed-down `isin` fails
        on files whose strings delta-rs wrote as string_view.
        """
        dataset = arrow_dataset(table, prune=partitions)
        wanted = pa.array(sorted(set(keys)), pa.string())
        matches = []
        for batch in dataset.to_batches():
            mask = pc.is_in(batch[key_column].cast(pa.string()), value_set=wanted)
            if pc.any(mask).as_py():
                matches.append(batch.filter(mask))
        return pa.Table.from_batches(matches, schema=dataset.schema)

    def _checkpointed(self, name: str, read: DeltaTable | None) -> DeltaTable:
        """The table after a commit, with a log checkpoint written if its version is due one (`CHECKPOINT_EVERY`).

        `read`, the snapshot the commit was made against, is that table: delta-rs moves it to the new version in
        place, so it is not loaded again (None: the commit created the table, which is loaded). A crash before the
        checkpoint loses nothing: it only speeds up loading, and the next due version writes one.
        """
        table = read if read is not None else DeltaTable(self.uri(name), storage_options=self._options())
        if table.version() % CHECKPOINT_EVERY == 0:
            table.create_checkpoint()
        return table

    def commit_state(self, table: DeltaTable | None, key: str) -> dict:
        """The newest state this platform stored under `key` in the commit metadata of `table` ({} if none)."""
        if table is None:
            return {}
        located = table.transaction_version(state_app(key))
        if located is None:  # no commit ever stored state under `key` (every one carries the app transaction)
            return {}
        log_files = pafs.PyFileSystem(DeltaStorageHandler(table.table_uri, self._options()))
        for version in range(located, table.version() + 1):
            info = self._commit_info(log_files, version)
            if info is None:
                break
            if key in info:
                return json.loads(info[key])
        log.warning(
            "Delta table %s: the commit holding its %s state (version %d or the next ones carrying it) is no "
            "longer in _delta_log (log retention?); reading the newest %d commits instead",
            table.table_uri,
            key,
            located,
            HISTORY_SCAN,
        )
        return self._scanned_state(table, key)

    def app_transactions(self, table: DeltaTable) -> dict[str, int] | None:
        """Every app transaction of the snapshot (`appId -> version`), read from `_delta_log` in one pass.

        `table.transaction_version(app_id)` replays the log for each id it is asked: asking it for every landing
        file would make a run's cost grow with the landing zone (6 ms a call at 6,800 files: 40 s a run). This
        reads the newest checkpoint's `txn` column and the JSON commits after it up to the snapshot's version,
        once. Log layouts it does not read (a checkpoint newer than the snapshot, v2 checkpoints) fall back to
        nothing: callers then ask `transaction_version` per id.
        """
        log_files = pafs.PyFileSystem(DeltaStorageHandler(table.table_uri, self._options()))
        version = table.version()
        start = 0
        txns: dict[str, int] = {}
        stamps: dict[str, int | None] = {}  # lastUpdated, when the writer stamped one
        try:
            with log_files.open_input_stream("_delta_log/_last_checkpoint") as f:
                last = json.loads(f.read().decode())
        except FileNotFoundError:
            last = None
        if last is not None:
            if last["version"] > version:
                return None
            parts = last.get("parts")
            names = (
                [f"{last['version']:020d}.checkpoint.parquet"]
                if not parts
                else [f"{last['version']:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]
            )
            for name in names:
                with log_files.open_input_file(f"_delta_log/{name}") as f:
                    txn = pq.read_table(f, columns=["txn"])["txn"]
                txn = txn.filter(pc.is_valid(txn)).combine_chunks()
                ids = txn.field("appId").to_pylist()
                txns.update(zip(ids, txn.field("version").to_pylist()))
                stamps.update(zip(ids, txn.field("lastUpdated").to_pylist()))
            start = last["version"] + 1
        for v in range(start, version + 1):
            with log_files.open_input_stream(f"_delta_log/{v:020d}.json") as f:
                for line in f.read().decode().split("\n"):
                    if '"txn"' in line and (txn := json.loads(line).get("txn")) is not None:
                        txns[txn["appId"]] = txn["version"]
                        stamps[txn["appId"]] = txn.get("lastUpdated")
        retention = txn_retention_ms(table)
        if retention is not None:  # as delta-rs reads them: stamped ones older than the retention are gone
            oldest = int(time.time() * 1000) - retention
            txns = {a: v for a, v in txns.items() if (stamp := stamps.get(a)) is None or stamp >= oldest}
        return txns

    @staticmethod
    def _commit_info(log_files: pafs.FileSystem, version: int) -> dict | None:
        """The commitInfo action of one commit, read from its `_delta_log` JSON file; None if it is gone."""
        try:
            with log_files.open_input_stream(f"_delta_log/{version:020d}.json") as f:
                text = f.read().decode()
        except FileNotFoundError:
            return None
        for line in text.split("\n"):
            if '"commitInfo"' in line and (info := json.loads(line).get("commitInfo")) is not None:
                return info
        return {}

    @staticmethod
    def _scanned_state(table: DeltaTable, key: str) -> dict:
        for commit in table.history(HISTORY_SCAN):
            if key in commit:
                return json.loads(commit[key])
        return {}

    @staticmethod
    def properties(
        key: str, state: dict, txns: dict[str, int], *, version: int, expiring: dict[str, int] | None = None
    ) -> CommitProperties:
        """Commit properties storing `state` under `key` in the commit that will be `version` (see `commit_state`),
        with the app transactions `txns` (kept forever) and `expiring` (stamped with the commit's time, so a
        table's `delta.setTransactionRetentionDuration` drops them once that long has passed)."""
        located = {state_app(key): version}
        now_ms = int(time.time() * 1000)
        return CommitProperties(
            custom_metadata={key: json.dumps(state, sort_keys=True, default=str)},
            app_transactions=[
                *(Transaction(app_id=a, version=v) for a, v in (txns | located).items()),
                *(Transaction(app_id=a, version=v, last_updated=now_ms) for a, v in (expiring or {}).items()),
            ],
        )

    @contextmanager
    def _sole_writer(self, name: str, read: DeltaTable | None) -> Iterator[None]:
        """Refuse a table whose protocol left the readers' allow-list (resources/delta_protocol.py) before writing;
        turn delta-rs's rejection of a commit that raced another writer into an error that says what to do."""
        if read is not None:
            ensure_supported(read, name)
        try:
            yield
        except CommitFailedError as exc:
            raise ConcurrentWriteError(self._conflict(name, read, exc)) from exc
        except DeltaError as exc:
            if read is None and "already exists" in str(exc):
                raise ConcurrentWriteError(self._conflict(name, read, exc)) from exc
            raise

    def _conflict(self, name: str, read: DeltaTable | None, exc: Exception) -> str:
        now = self.table(name)
        seen = f"read it at version {read.version()}" if read is not None else "found no table"
        reason = str(exc).strip().splitlines()[0]
        return (
            f"Delta table {name}: another writer committed to it (now at version "
            f"{now.version() if now is not None else '?'}) after this run {seen}; delta-rs rejected this run's "
            f"commit ({reason}), so nothing of it was written and the table is as the other writer left it. "
            f"Two runs wrote {name} at the same time: give its Dagster pool one concurrency slot (README "
            f"'Dagster instance'). Re-running is safe: a new run continues from the other writer's checkpoint."
        )

    def append(
        self,
        name: str,
        data: pa.Table,
        *,
        read: DeltaTable | None,
        partition_by: list[str] | None,
        key: str,
        state: dict,
        txns: dict[str, int],
        description: str | None = None,
        configuration: dict[str, str] | None = None,
        expiring: dict[str, int] | None = None,
    ) -> DeltaTable:
        """Append `data` (possibly empty) and its checkpoint in one commit against `read`, the snapshot the
        checkpoint was read from (None: there was no table, so this creates it, with the table properties
        `configuration`); returns the table after it. `expiring`: app transactions that may expire
        (`properties`)."""
        with self._sole_writer(name, read):
            write_deltalake(
                read if read is not None else self.uri(name),
                data,
                mode="append" if read is not None else "error",
                partition_by=partition_by,
                schema_mode="merge",
                description=description,
                configuration=self._created_with(name, configuration) if read is None else None,
                storage_options=self._options(),
                commit_properties=self.properties(key, state, txns, version=next_version(read), expiring=expiring),
            )
        return self._checkpointed(name, read)

    @staticmethod
    def _created_with(name: str, configuration: dict[str, str] | None) -> dict[str, str] | None:
        """Table properties of a new table: the writer's, plus a Change Data Feed for a replica."""
        return {**(table_configuration(name) or {}), **(configuration or {})} or None

    def overwrite(
        self,
        name: str,
        data: pa.RecordBatchReader,
        *,
        read: DeltaTable | None,
        partition_by: list[str],
        key: str,
        state: dict,
        txns: dict[str, int],
        description: str | None = None,
        configuration: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Replace the table's rows and schema with `data` (streamed) in one commit against `read` (None: create,
        with the table properties `configuration`; an existing table keeps its own)."""
        with self._sole_writer(name, read):
            write_deltalake(
                read if read is not None else self.uri(name),
                data,
                mode="overwrite" if read is not None else "error",
                partition_by=partition_by,
                schema_mode="overwrite" if read is not None else None,
                description=description,
                configuration=self._created_with(name, configuration) if read is None else None,
                storage_options=self._options(),
                commit_properties=self.properties(key, state, txns, version=next_version(read)),
            )
        return self._checkpointed(name, read)

    def commit_files(
        self,
        name: str,
        actions: list[AddAction],
        *,
        read: DeltaTable | None,
        schema: pa.Schema,
        partition_by: list[str],
        key: str,
        state: dict,
        txns: dict[str, int],
        description: str | None = None,
        configuration: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Replace the table's rows and schema with Parquet files already written under its folder (`actions`: their
        add actions, paths relative to it), in one commit against `read` (None: create the table, with
        `description` and the table properties `configuration`); the files are not read again."""
        properties = self.properties(key, state, txns, version=next_version(read))
        with self._sole_writer(name, read):
            if read is None:
                create_table_with_add_actions(
                    self.uri(name),
                    Schema.from_arrow(schema),
                    actions,
                    mode="error",
                    partition_by=partition_by,
                    description=description,
                    configuration=self._created_with(name, configuration),
                    storage_options=self._options(),
                    commit_properties=properties,
                )
            else:
                read.create_write_transaction(
                    actions,  # type: ignore[arg-type]  # delta-rs types the list invariant: adds alone are valid
                    mode="overwrite",
                    schema=Schema.from_arrow(schema),
                    partition_by=partition_by,
                    commit_properties=properties,
                )
        return self._checkpointed(name, read)

    def commit_rows(
        self,
        name: str,
        rows: pa.Table,
        *,
        read: DeltaTable | None,
        key_column: str | Sequence[str],
        partition_column: str,
        key: str,
        state: dict,
        txns: dict[str, int],
        description: str | None = None,
        configuration: dict[str, str] | None = None,
    ) -> DeltaTable:
        """Write `rows` (whole rows, keyed by `key_column`) with their checkpoint in one commit against `read`, the
        snapshot the checkpoint was read from; returns the table after it. The one rule of every writer that keeps
        rows by key (a replica's apply and poll, a history):

        - no table yet (`read` None): the commit creates it with `rows`, partitioned by `partition_column`, with
          `description` and the table properties `configuration`;
        - no rows: an empty commit, which stores the checkpoint all the same (a merge of no rows commits nothing,
          and a checkpoint that never moves makes the next run read the same changes again);
        - else a merge by `key_column` within the rows' own partitions (`merge_predicate`).
        """
        if read is None or not rows.num_rows:
            return self.append(
                name,
                rows,
                read=read,
                partition_by=[partition_column],
                key=key,
                state=state,
                txns=txns,
                description=description if read is None else None,
                configuration=configuration,
            )
        return self.upsert(
            name,
            rows,
            read=read,
            key_column=key_column,
            partition_column=partition_column,
            partition_values=pc.unique(rows[partition_column]).to_pylist(),
            key=key,
            state=state,
            txns=txns,
        )

    def upsert(
        self,
        name: str,
        data: pa.Table,
        *,
        read: DeltaTable,
        key_column: str | Sequence[str],
        partition_column: str,
        partition_values: Iterable[str],
        key: str,
        state: dict,
        txns: dict[str, int],
    ) -> DeltaTable:
        """Insert-or-replace rows by `key_column` (or several key columns) in one merge commit against `read` (the
        snapshot the checkpoint was read from), touching only the named partitions (`merge_predicate`); returns the
        table after it."""
        predicate = merge_predicate(key_column, partition_column, partition_values)
        with self._sole_writer(name, read):
            (
                self._merger(read, data, predicate, self.properties(key, state, txns, version=next_version(read)))
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        return self._checkpointed(name, read)

    def update_columns(
        self,
        name: str,
        data: pa.Table,
        *,
        read: DeltaTable,
        key_column: str,
        columns: Sequence[str],
        partition_column: str,
        partition_values: Iterable[str],
        key: str,
        state: dict,
        txns: dict[str, int],
        insert: Sequence[str] = (),
    ) -> tuple[DeltaTable, int]:
        """Set `columns` of the rows whose `key_column` is in `data` (no other column touched), in one merge commit
        against `read`, touching only the named partitions; with the state, also when no row matched. A row of
        `data` the table lacks is inserted with its `insert` columns (none: no row inserted). Returns the table after
        the commit and the number of rows updated or inserted."""
        predicate = merge_predicate(key_column, partition_column, partition_values)
        version = next_version(read)
        properties = self.properties(key, state, txns, version=version)
        with self._sole_writer(name, read):
            metrics = {}
            if data.num_rows:
                merger = self._merger(read, data, predicate, properties).when_matched_update(
                    updates={c: f"s.{c}" for c in columns}
                )
                if insert:
                    merger = merger.when_not_matched_insert(updates={c: f"s.{c}" for c in insert})
                metrics = merger.execute()
        if read.version() < version:  # nothing matched (or nothing read): the state still commits
            empty = pa.schema(read.schema().to_arrow()).empty_table()
            return self.append(
                name,
                empty,
                read=read,
                partition_by=read.metadata().partition_columns or None,
                key=key,
                state=state,
                txns=txns,
            ), 0
        written = int(metrics.get("num_target_rows_updated", 0)) + int(metrics.get("num_target_rows_inserted", 0))
        return self._checkpointed(name, read), written

    def insert_missing(self, name: str, data: pa.Table, *, keys: Sequence[str], key: str, state: dict) -> None:
        """Insert rows whose `keys` are not in the table yet (idempotent append); creates the table if needed."""
        table = self.table(name)
        if table is None:
            self.append(name, data, read=None, partition_by=None, key=key, state=state, txns={})
            return
        ensure_supported(table, name)
        predicate = merge_predicate(keys)
        (
            self._merger(table, data, predicate, self.properties(key, state, {}, version=next_version(table)))
            .when_not_matched_insert_all()
            .execute()
        )
        self._checkpointed(name, table)
