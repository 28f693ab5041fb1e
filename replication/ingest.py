"""Landing files -> change_events, exactly once (docs/design/contract.md §4, §5, §9).

One run ingests every landing file that no change_events commit has ingested yet, in batches of files of at most
`max_batch_bytes` of text together, a `.gz` counted inflated (a backlog of any size is read a bounded slice at a
time; a larger file is a batch of its own). For each batch:

1. list files; a file is ingested iff a change_events commit carries its app transaction (`file_app_id`:
   `landing:<path>@<size>@<modified>`), so a file landed again under the name of a retired one is read as the new
   file it is, while an ingested file still in the zone is skipped unread;
2. read and parse the lines on Spark, each file in its format (CometD, or Datastream's: spark_ops/datastream.py),
   each object's lines with its schema, chosen by the entity the parse reads (`parsed`); bad lines (and unreadable
   files) go to `_quarantine`, keyed by (file, line) so a re-run inserts nothing twice;
3. drop events already stored (same identity and record, looked up only in the touched entities and commit-time
   range, so also those of the batches before) or repeated within the batch;
4. append the rest in **one commit** that also records the batch's files, the new ingest sequence number and the
   newest event seen so far, with what closes transactions (§5, `replication/closure.py`).

A crash before a batch's step 4 leaves none of its files ingested; a crash after it leaves all of them ingested.
Either way the next run produces the same table.

**A file that breaks ingest holds back no other.** A batch that fails for a reason that may lie in its files (any
error but those of the environment, `ENVIRONMENT_ERRORS`: a commit conflict, a lost connection, a setting) is
ingested again in halves, down to the file that fails on its own (`isolating`). That file is tried once more; if it
fails again while the environment answers (`environment_failure`: the zone lists, the tables load, Spark computes),
it is quarantined whole (`source_line` 0, the error's type and first line) and recorded as ingested in a batch of its
own, counted in `files_failed`, and the check `no_failed_landing_files` fails naming it until acknowledged. Its
quarantine row is written before its ledger commit (steps 2 and 4): after a crash between them the file is still
pending, fails again, and the row is not written twice. Any other failure fails the run, and the sensor asks again.
A file that kills the run process, with no exception to isolate it by, is found the same way across runs
(`outliving`: each run counts in change_events the batches it begins).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from py4j.protocol import Py4JNetworkError
from pyspark.sql import SparkSession

from object_schema.describe import ObjectSchema
from object_schema.hashing import MissingSaltError
from replication.closure import ingest_progress
from replication.config import ConfigError
from replication.damaged import resync_lines
from replication.quarantine import quarantine_example, record_quarantine
from replication.schemas import SchemaCatalog, redacts
from replication.state import Q_STATE, IngestState
from replication.timing import Stopwatch
from resources.delta import CHANGE_EVENTS, QUARANTINE, ConcurrentWriteError, DeltaWarehouse
from resources.landing_zone import QUARANTINE_SCHEMA, LandingFile, LandingZone, entities_named
from resources.printable import printable
from resources.salesforce import SalesforceApiError
from resources.spark import from_arrow, small_query
from shared.commit_time import LATEST_COMMIT_RULE, latest_commit_ms
from shared.faults import InjectedFault, data_fault_point, fault_point
from spark_ops.datastream import parse_landed
from spark_ops.events import DEDUP_KEY
from spark_ops.parse import CHANGE_COLUMNS, MAX_BATCH_CHANGE_BYTES, bound_batch, landed_rows, may_pass_batch_bound

log = logging.getLogger(__name__)

SEQ_APP = "change_events"


def file_app_id(f: LandingFile) -> str:
    """The app transaction recording that change_events ingested `f`. The path alone would take a file landed
    again under a retired file's name (a subscriber re-landing after a crash) for the one ingested, and never read
    it; with the size and modification time the listing gives, that file is new."""
    return f"landing:{f.path}@{f.size}@{f.modified}"


# Failures of the environment, never of one file: another writer committed first, a simulated crash, a lost
# connection, a file gone since the listing, a setting or the org's describe() missing. The run fails (the sensor
# asks again, with backoff) and no file is blamed.
ENVIRONMENT_ERRORS = (
    ConcurrentWriteError,
    InjectedFault,
    ConnectionError,
    TimeoutError,
    FileNotFoundError,
    Py4JNetworkError,
    ConfigError,
    MissingSaltError,
    SalesforceApiError,
)
FAILED_FILE = "file failed to ingest"  # how the quarantine reason of a file that failed on its own starts


@dataclass
class IngestResult:
    files: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    state: IngestState = field(default_factory=IngestState)
    version: int | None = None
    quarantine_examples: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # files that failed on their own: quarantined whole
    unread: list[LandingFile] = field(default_factory=list)  # files of the batch left for the next (`max_text`)

    def add(self, batch: IngestResult) -> None:
        """Count `batch`, ingested after the batches already counted."""
        self.files += batch.files
        self.counts = {k: self.counts.get(k, 0) + v for k, v in batch.counts.items()}
        self.state, self.version = batch.state, batch.version
        self.quarantine_examples = (self.quarantine_examples + batch.quarantine_examples)[:5]
        self.seconds = {
            k: self.seconds.get(k, 0.0) + batch.seconds.get(k, 0.0) for k in {*self.seconds, *batch.seconds}
        }
        self.failed += batch.failed


def landing_files(warehouse: DeltaWarehouse, landing: LandingZone) -> tuple[list[LandingFile], list[LandingFile]]:
    """The visible landing files split in two: those no change_events commit has ingested, and those one has."""
    table = warehouse.table(CHANGE_EVENTS)
    files = landing.list_files()
    if table is None:
        return files, []
    known = warehouse.app_transactions(table)
    if known is None:
        done = {f for f in files if table.transaction_version(file_app_id(f)) is not None}
    else:
        done = {f for f in files if file_app_id(f) in known}
    return [f for f in files if f not in done], [f for f in files if f in done]


def pending_files(warehouse: DeltaWarehouse, landing: LandingZone) -> list[LandingFile]:
    """Visible landing files that no change_events commit has ingested."""
    return landing_files(warehouse, landing)[0]


def _stored(warehouse: DeltaWarehouse, rows: pa.Table) -> pa.Array:
    """Per change row: its event (`DEDUP_KEY`) is already stored in change_events. Only the stored keys of the
    entities and commit-time range of `rows` are read (the Delta log's statistics prune the files)."""
    table = warehouse.table(CHANGE_EVENTS)
    if table is None or not rows.num_rows:
        return pa.repeat(pa.scalar(False), rows.num_rows)
    bounds = rows.group_by("entity").aggregate([("commit_ts", "min"), ("commit_ts", "max")]).to_pylist()
    parts = []
    for b in bounds:
        lo, hi = (pa.scalar(b[k], pa.timestamp("us", tz="UTC")) for k in ("commit_ts_min", "commit_ts_max"))
        flt = (pc.field("commit_ts") >= lo) & (pc.field("commit_ts") <= hi)
        parts.append(
            warehouse.read(
                table,
                partitions=[("entity", "=", b["entity"])],
                filter=flt,
                columns=DEDUP_KEY,
                prune=[("commit_ts", ">=", lo.as_py()), ("commit_ts", "<=", hi.as_py())],
            )
        )
    known = pa.concat_tables(parts) if parts else None
    if known is None or not known.num_rows:
        return pa.repeat(pa.scalar(False), rows.num_rows)
    return pc.is_in(_dedup_key(rows), value_set=_dedup_key(known))


def _dedup_key(rows: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(*(rows[k].cast(pa.string()) for k in DEDUP_KEY), "\x00")


MAX_BATCH_BYTES = 128 * 1024 * 1024


def batches(
    files: list[LandingFile], max_bytes: int, size: Callable[[LandingFile], int] = lambda f: f.size
) -> list[list[LandingFile]]:
    """`files` in order, cut into runs of at most `max_bytes` together by `size` (a larger file alone): ingest
    counts a file's text (`LandingZone.text_size`), so a batch of small `.gz` files that inflate 200x holds no more
    text than one of plain files."""
    out: list[list[LandingFile]] = []
    total = 0
    for f in files:
        n = size(f)
        if not out or total + n > max_bytes:
            out.append([])
            total = 0
        out[-1].append(f)
        total += n
    return out


@dataclass(frozen=True)
class IngestRun:
    """What every batch of one ingest shares: the session, the landing zone and the table it goes to, the replicated
    objects' schemas, the run and its clock, and the batch bounds (`max_text`: a batch's files, by the size of their
    text; the files not begun once the text read reaches it are left to the next batch; `max_change_bytes`: the lines past it in change rows are taken as
    overflows of their object, `bound_batch`)."""

    spark: SparkSession
    warehouse: DeltaWarehouse
    landing: LandingZone
    schemas: Mapping[str, ObjectSchema]
    run_id: str
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    max_text: int = MAX_BATCH_BYTES
    max_change_bytes: int = MAX_BATCH_CHANGE_BYTES


def ingest(run: IngestRun) -> IngestResult:
    """Ingest every pending landing file, one commit per batch; the counts and timings of all batches summed.
    `run.schemas`: the replicated objects' schemas by name; only those a batch's lines name are looked up (a lazy
    mapping, `replication.schemas.SchemaCatalog`, resolves no others)."""
    warehouse, landing, max_batch_bytes = run.warehouse, run.landing, run.max_text
    attempt = functools.partial(_ingest_batch, run)
    environment = functools.partial(environment_failure, run.spark, warehouse, landing)
    total = IngestResult(counts=_zero_counts())
    pending = pending_files(warehouse, landing)
    sizes = {f: landing.text_size(f) for f in pending}
    while pending:
        batch = batches(pending, max_batch_bytes, sizes.__getitem__)[0]
        results = outliving(warehouse, attempt, batch, environment)
        for result in results:
            total.add(result)
        # A file whose text was more than its gzip trailer said ends its batch early: the files after it come next.
        done = set(batch).difference(f for result in results for f in result.unread)
        pending = [f for f in pending if f not in done]
    return total


# Runs that died holding one landing file alone (and no other batch) before it is set aside: one death may be the
# machine's (a restart, an operator's kill), and a file set aside is the operator's to land again.
DEATHS_ALONE = 2
ATTEMPT_PREFIX = "ingest-attempt:"  # + a digest of the batch's files: how many runs began ingesting exactly them


def attempt_app(files: list[LandingFile]) -> str:
    """The app transaction of change_events counting the runs that began ingesting exactly `files`."""
    digest = hashlib.sha256("\0".join(file_app_id(f) for f in files).encode()).hexdigest()[:24]
    return ATTEMPT_PREFIX + digest


def outliving(
    warehouse: DeltaWarehouse,
    attempt: Callable[..., IngestResult],
    files: list[LandingFile],
    environment: Callable[[], Exception | None],
) -> list[IngestResult]:
    """`isolating(attempt, files)`, recorded first as begun (`attempt_app`), so that a file which kills the run
    process itself (out of memory, a crash in a native reader, a timeout: no Python exception to isolate it by)
    holds back no other either. Files a run died holding are ingested in halves by the next run; a file runs died
    holding alone `DEATHS_ALONE` times is set aside while the environment answers: quarantined whole and recorded
    as ingested, as a file failing on its own is (`_failed_alone`), and the check `no_failed_landing_files` names
    it. The count is an app transaction of change_events, committed before the attempt (none before the table
    exists: the first batch ever is not counted)."""
    events = warehouse.table(CHANGE_EVENTS)
    if events is None:
        return isolating(attempt, files, environment)
    deaths = events.transaction_version(attempt_app(files)) or 0
    if deaths and len(files) > 1:
        log.warning(
            "The run process died while ingesting the same %d landing files; ingesting them in halves to find the "
            "file that kills it",
            len(files),
        )
        half = len(files) // 2
        return [
            *outliving(warehouse, attempt, files[:half], environment),
            *outliving(warehouse, attempt, files[half:], environment),
        ]
    if deaths >= DEATHS_ALONE:
        if (down := environment()) is not None:
            raise down
        reason = (
            f"{FAILED_FILE}: the run process died {deaths} times ingesting it alone (killed: out of memory, a "
            f"crash, a timeout); quarantined whole and recorded as ingested, so the other files went on: none of "
            f"its events are in change_events. Fix the cause, then land the file again under a new name to ingest it"
        )
        log.error("Landing file %s: %s", printable(files[0].path), reason)
        return [attempt(files, failed={files[0]: reason})]
    _count_attempts(warehouse, events, files, deaths + 1)
    try:
        return isolating(attempt, files, environment)
    except ConcurrentWriteError:
        raise  # another run committed first (these files, most likely): a loser writes nothing more
    except ENVIRONMENT_ERRORS:
        # The run fails on its environment, not on its files: the attempt is taken back if the table answers, so a
        # flaky connection does not set a good file aside.
        with contextlib.suppress(Exception):
            _count_attempts(warehouse, warehouse.table(CHANGE_EVENTS), files, deaths)
        raise


def _count_attempts(warehouse: DeltaWarehouse, events: DeltaTable | None, files: list[LandingFile], n: int) -> None:
    """Commit that `n` runs began ingesting exactly `files` (`attempt_app`): no rows, the ingest state as it was."""
    assert events is not None, "attempts are counted in an existing change_events"
    state = IngestState.read(warehouse, events)
    warehouse.append(
        CHANGE_EVENTS,
        pa.schema(events.schema().to_arrow()).empty_table(),
        read=events,
        partition_by=["entity"],
        key=state.KEY,
        state=state.to_dict(),
        txns={},
        expiring={attempt_app(files): n},
    )


def isolating(
    attempt: Callable[..., IngestResult], files: list[LandingFile], environment: Callable[[], Exception | None]
) -> list[IngestResult]:
    """`attempt(files)` (`_ingest_batch`); if it fails with an error that may lie in a file, the same for each
    half, down to the file that fails on its own (`_failed_alone`), so that one file never holds back the others."""
    try:
        return [attempt(files)]
    except ENVIRONMENT_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 not swallowed: the file that causes it is found and quarantined, or the run fails
        error = exc
    if len(files) == 1:
        return [_failed_alone(attempt, files[0], error, environment)]
    log.warning(
        "A batch of %d landing files failed (%s); ingesting it in halves to find the file that fails",
        len(files),
        error_text(error),
    )
    half = len(files) // 2
    return [*isolating(attempt, files[:half], environment), *isolating(attempt, files[half:], environment)]


def _failed_alone(
    attempt: Callable[..., IngestResult], f: LandingFile, error: Exception, environment: Callable[[], Exception | None]
) -> IngestResult:
    """`f` failed on its own with `error`: tried once more, and if it fails again while the environment answers,
    quarantined whole and recorded as ingested (`attempt` with `failed`), so it is not retried forever."""
    log.warning("Landing file %s failed on its own (%s); trying it once more", printable(f.path), error_text(error))
    try:
        return attempt([f])
    except ENVIRONMENT_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 quarantined below, or the run fails
        error = exc
    if (down := environment()) is not None:
        log.error(
            "Landing file %s failed again (%s), and the environment fails too (%s): the file is not "
            "quarantined; the run fails and is asked again",
            printable(f.path),
            error_text(error),
            error_text(down),
        )
        raise error from down
    reason = (
        f"{FAILED_FILE} on its own, twice ({error_text(error)}); quarantined whole and recorded as ingested, "
        f"so the other files went on: none of its events are in change_events. Fix the cause, then land the "
        f"file again under a new name to ingest it"
    )
    log.error("Landing file %s: %s", printable(f.path), reason)
    return attempt([f], failed={f: reason})


def error_text(error: BaseException) -> str:
    """An error as a quarantine reason or a log line quotes it: its type and the first line of its message, with
    what is not printable escaped (it may quote landed text)."""
    lines = str(error).strip().splitlines()
    return printable(f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)


def environment_failure(spark: SparkSession, warehouse: DeltaWarehouse, landing: LandingZone) -> Exception | None:
    """Why nothing could be ingested now (the landing zone does not list, a table does not load, Spark does not
    compute), or None: what tells a file that breaks ingest from an environment that does."""
    try:
        landing.list_files()
        for name in (CHANGE_EVENTS, QUARANTINE):
            warehouse.table(name)
        spark.range(1).collect()
    except Exception as exc:  # noqa: BLE001 returned: the caller fails the run with it
        return exc
    return None


def _ingest_batch(
    run: IngestRun, files: list[LandingFile], *, failed: Mapping[LandingFile, str] | None = None
) -> IngestResult:
    """Steps 2 to 4 (module docstring) for `files`. `failed`: those of them that failed on their own, with the
    reason: not read, but quarantined whole and recorded as ingested with the others."""
    failed = failed or {}
    watch = Stopwatch()
    # The snapshot this batch reads its checkpoint from and commits against (DeltaWarehouse.append): if another
    # writer commits in between, this commit fails instead of ingesting the same files twice.
    events = run.warehouse.table(CHANGE_EVENTS)
    if done := [f for f in files if events is not None and events.transaction_version(file_app_id(f)) is not None]:
        assert events is not None, "a file is found ingested only in an existing change_events"
        log.warning("%d landing files were ingested by another run meanwhile; skipped", len(done))
        files = [f for f in files if f not in done]
        failed = {f: reason for f, reason in failed.items() if f in files}
        if not files:
            return IngestResult(
                counts=_zero_counts(), state=IngestState.read(run.warehouse, events), version=events.version()
            )
    read = run.landing.read([f for f in files if f not in failed], run.max_text)
    files = [f for f in files if f not in read.unread]
    # A file that lost content asks a resync of the objects it names, as an overflow does (replication/damaged.py).
    lines = pa.concat_tables([read.lines, resync_lines(read.damaged, files, replicated=run.schemas, at=run.now)])
    watch.lap("read")
    fault_point("ingest.after_read")
    data_fault_point("ingest.poisoned_line", read.lines["raw"])
    landed, parsed_with = _parse_batch(run, lines)
    quarantine = landed["quarantine"]
    bad_lines = landed.filter(quarantine)
    bad = pa.concat_tables(
        [bad_lines.select(QUARANTINE_SCHEMA.names).cast(QUARANTINE_SCHEMA), read.quarantine, _whole_files(failed)]
    )
    watch.lap("parse")
    fault_point("ingest.after_parse")
    # Every replicated object's schema may be asked for: a line the parse could not read names its object only in
    # its text, and the redaction reads that (replication/quarantine.py).
    record_quarantine(
        run.warehouse,
        bad,
        run_id=run.run_id,
        now=run.now,
        key=Q_STATE,
        schemas=run.schemas,
        redact=redacts(run.schemas),
    )
    fault_point("ingest.after_quarantine")
    marked = _marked_duplicates(run.warehouse, landed.filter(pc.invert(quarantine)))
    watch.lap("dedup")
    fault_point("ingest.after_dedup")
    counts = _count(files, read, bad, marked, parsed_with, failed=len(failed)) | {
        "lines_gapped": int(pc.sum(bad_lines["gapped"]).as_py() or 0)
    }
    state, version = _commit_batch(run, events, files, marked, counts)
    watch.lap("write")
    fault_point("ingest.after_commit")
    return IngestResult(
        files=state.files,
        counts=counts,
        state=state,
        version=version,
        quarantine_examples=[quarantine_example(r) for r in bad.slice(0, 5).to_pylist()],
        seconds=watch.seconds,
        failed=[f.path for f in failed],
        unread=read.unread,
    )


def _parse_batch(run: IngestRun, lines: pa.Table) -> tuple[pa.Table, dict[str, ObjectSchema]]:
    """The batch's lines parsed (`quarantine` marking the bad ones), with the schemas they were parsed with."""
    landed, parsed_with = parsed(run.spark, lines, run.schemas, run.max_change_bytes)
    landed = retyped_values(run.spark, lines, landed, run.schemas, parsed_with, run.max_change_bytes)
    return refuse_future_commits(lines, landed, latest_commit_ms()), parsed_with


def _marked_duplicates(warehouse: DeltaWarehouse, good: pa.Table) -> pa.Table:
    """The good lines' change rows, `is_duplicate` also set for the events change_events already holds."""
    rows = good.drop_columns(["quarantine", "raw", "reason", "gapped"])
    return rows.set_column(
        rows.schema.get_field_index("is_duplicate"),
        "is_duplicate",
        pc.or_(rows["is_duplicate"], _stored(warehouse, rows)),
    )


def _commit_batch(
    run: IngestRun, events: DeltaTable | None, files: list[LandingFile], marked: pa.Table, counts: dict[str, int]
) -> tuple[IngestState, int]:
    """Step 4: the new rows, the ingest state and every file's app transaction in one commit of change_events
    (against `events`, the snapshot the batch read); the state committed and the table's version."""
    previous = IngestState.read(run.warehouse, events)
    seq = previous.ingest_seq + 1
    fresh = marked.filter(pc.invert(marked["is_duplicate"])).select(CHANGE_COLUMNS)
    fresh = fresh.append_column("_ingest_seq", pa.repeat(pa.scalar(seq, pa.int64()), fresh.num_rows)).append_column(
        "_ingested_at", pa.repeat(pa.scalar(run.now, pa.timestamp("us", tz="UTC")), fresh.num_rows)
    )
    # The newest event and the close timer (replication/closure.py), then what this batch was.
    state = replace(
        ingest_progress(previous, fresh, seq, run.now),
        files=[f.path for f in files],
        counts=counts,
        run_id=run.run_id,
    )
    # A landing file's app transaction may expire once upkeep has retired the file (replication/upkeep/landing.py).
    fault_point("ingest.before_commit")
    table = run.warehouse.append(
        CHANGE_EVENTS,
        fresh,
        read=events,
        partition_by=["entity"],
        key=state.KEY,
        state=state.to_dict(),
        txns={SEQ_APP: seq},
        expiring={file_app_id(f): 1 for f in files},
    )
    return state, table.version()


def landed_batch(
    spark: SparkSession, lines: pa.Table, schemas: dict[str, ObjectSchema], max_change_bytes: int
) -> pa.Table:
    """`lines` parsed with `schemas` to change rows and quarantine entries (`landed_rows`) in one Spark job, at most
    `max_change_bytes` of change rows (`bound_batch`: the lines past it taken as overflows)."""
    with small_query(spark, lines.num_rows):  # a landing run of a few lines: its fixed cost (resources/spark.py)
        frame = parse_landed(from_arrow(spark, lines), schemas)
        text = pc.sum(pc.binary_length(lines["raw"])).as_py() or 0
        if may_pass_batch_bound(text, lines.num_rows, max_change_bytes):
            frame = bound_batch(frame, max_change_bytes)
        return landed_rows(frame).toArrow()


def parsed(
    spark: SparkSession, lines: pa.Table, catalog: Mapping[str, ObjectSchema], max_change_bytes: int
) -> tuple[pa.Table, dict[str, ObjectSchema]]:
    """`lines` parsed to change rows and quarantine entries (`landed_rows`), and the schemas they were parsed with:
    those of the replicated objects the lines name, which decide what `hash:` and `fields:` protect.

    One Spark job parses every line once (CometD and Datastream files, spark_ops/datastream.py), explodes the
    change rows and marks those repeated within the batch. Which objects to parse with is first read from the text
    (`entities_named`): the parse has a branch per object, and describing objects the batch does not touch
    (hundreds, in a large org) would make every run's cost follow the number of objects replicated. The text scan
    misses a name spelled with JSON escapes (`"Cont\\u0061ct"` is Contact): if the parse read a replicated
    object the scan missed, the lines are parsed again with its schema too, so that no value it protects is
    stored in clear; the entity a line names does not depend on the schemas, so once is enough."""

    schemas = _schemas_of(catalog, entities_named(lines["raw"]))
    rows = landed_batch(spark, lines, schemas, max_change_bytes)
    if missed := _schemas_of(catalog, pc.unique(rows["entity"]).to_pylist()).keys() - schemas.keys():
        log.warning(
            "Landing lines name %s in a form the text scan does not read (JSON escapes); parsed again with "
            "their schemas",
            printable(", ".join(sorted(missed))),
        )
        schemas = _schemas_of(catalog, [*schemas, *missed])
        rows = landed_batch(spark, lines, schemas, max_change_bytes)
    return rows, schemas


def retyped_values(
    spark: SparkSession,
    lines: pa.Table,
    landed: pa.Table,
    catalog: Mapping[str, ObjectSchema],
    parsed_with: dict[str, ObjectSchema],
    max_change_bytes: int,
) -> pa.Table:
    """`landed` without the quarantine entries of lines whose value did not fit its column only because the field's
    type changed in the org: parsed again with the org's describe() (asked once per object such lines name), a line
    that fits is no bad input. Its change rows stay gap rows (its records dirty): the replica follows the new type
    when the reconcile reads them (replication/retype.py), so nothing is applied half and nothing is lost."""
    entries = landed.filter(pc.and_(landed["quarantine"], pc.fill_null(landed["gapped"], False)))
    if not entries.num_rows or not isinstance(catalog, SchemaCatalog):
        return landed
    keys = set(line_list(entries))
    gaps = landed.filter(pc.invert(landed["quarantine"]))
    named = {
        e
        for f, n, e in zip(
            gaps["source_file"].to_pylist(), gaps["source_line"].to_pylist(), gaps["entity"].to_pylist(), strict=True
        )
        if (f, n) in keys and e in parsed_with
    }
    retyped = {}
    for name in sorted(named):
        now = catalog.asked_again(name)
        if now is not None and retyped_columns_of(parsed_with[name], now):
            retyped[name] = now
    if not retyped:
        return landed
    again = lines.filter(on_lines(lines, keys))
    reparsed = landed_batch(spark, again, {**parsed_with, **retyped}, max_change_bytes)
    still = reparsed.filter(reparsed["quarantine"])
    bad = set(line_list(still))
    fits = keys - bad
    if not fits:
        return landed
    log.warning(
        "%d landing lines of %s carry values of a field whose type changed in the org: not quarantined; their "
        "records are reconciled, and the replica follows the new type then",
        len(fits),
        ", ".join(sorted(retyped)),
    )
    forgiven = pc.and_(landed["quarantine"], on_lines(landed, fits))
    return landed.filter(pc.invert(forgiven))


def line_list(table: pa.Table) -> list[tuple[str, int]]:
    """The line (`source_file`, `source_line`) of each row of `table`."""
    return list(zip(table["source_file"].to_pylist(), table["source_line"].to_pylist(), strict=True))


def on_lines(table: pa.Table, lines: Iterable[tuple[str, int]]) -> pa.ChunkedArray:
    """Whether each row of `table` is of one of `lines` (`source_file`, `source_line`)."""
    row_lines = pc.binary_join_element_wise(table["source_file"], table["source_line"].cast(pa.string()), "\x00")
    return pc.is_in(row_lines, value_set=pa.array([f"{f}\x00{n}" for f, n in lines], pa.string()))


def refuse_future_commits(lines: pa.Table, landed: pa.Table, latest_ms: int) -> pa.Table:
    """`landed` with every line whose change rows carry a commit time after `latest_ms` (shared/commit_time.py, the
    bound the subscriber applies) quarantined whole instead: its rows dropped, one entry with its text and why."""
    changes = pc.invert(landed["quarantine"])
    bound = pa.scalar(latest_ms, pa.timestamp("ms", tz="UTC")).cast(landed.schema.field("commit_ts").type)
    late = pc.and_(changes, pc.fill_null(pc.greater(landed["commit_ts"], bound), False))
    if not pc.any(late).as_py():
        return landed
    keys = set(line_list(landed.filter(late)))
    kept = landed.filter(pc.invert(pc.and_(changes, on_lines(landed, keys))))
    bad_lines = lines.filter(on_lines(lines, keys))
    text = dict(zip(line_list(bad_lines), bad_lines["raw"].to_pylist(), strict=True))
    entries = sorted(keys - set(line_list(landed.filter(landed["quarantine"]))))
    log.warning("%d landing lines carry a commit time %s: quarantined", len(entries), LATEST_COMMIT_RULE)
    values = {
        "source_file": [k[0] for k in entries],
        "source_line": [k[1] for k in entries],
        "quarantine": [True] * len(entries),
        "raw": [text[k] for k in entries],
        "reason": [f"header commitTimestamp is {LATEST_COMMIT_RULE}" for _ in entries],
        "gapped": [False] * len(entries),
        "is_duplicate": [False] * len(entries),
    }
    quarantine = pa.table(
        [
            pa.array(values[f.name], f.type) if f.name in values else pa.nulls(len(entries), f.type)
            for f in landed.schema
        ],
        schema=landed.schema,
    )
    return pa.concat_tables([kept, quarantine])


def retyped_columns_of(before: ObjectSchema, now: ObjectSchema) -> list[str]:
    """The columns of `before` that `now` types otherwise."""
    types = {f.name: f.type for f in now.arrow_schema()}
    return [f.name for f in before.arrow_schema() if f.name in types and types[f.name] != f.type]


def _schemas_of(catalog: Mapping[str, ObjectSchema], names: Iterable[str | None]) -> dict[str, ObjectSchema]:
    """The schemas of the replicated objects among `names`, in name order."""
    return {n: catalog[n] for n in sorted({n for n in names if n is not None}) if n in catalog}


def _whole_files(failed: Mapping[LandingFile, str]) -> pa.Table:
    """Quarantine entries of files that failed on their own: one per file, line 0, no text (the file stays where it
    is, in the zone or its archive)."""
    return pa.table(
        {
            "source_file": [f.path for f in failed],
            "source_line": [0] * len(failed),
            "raw": [None] * len(failed),
            "reason": list(failed.values()),
        },
        schema=QUARANTINE_SCHEMA,
    )


def _zero_counts() -> dict[str, int]:
    return dict.fromkeys(
        (
            "files",
            "files_quarantined",
            "files_failed",
            "lines_read",
            "lines_quarantined",
            "lines_blank",
            "lines_gapped",
            "events_parsed",
            "duplicates",
            "ingested",
            "ignored",
        ),
        0,
    )


def _count(
    files: list[LandingFile], read, bad: pa.Table, marked: pa.Table, schemas: Mapping[str, ObjectSchema], *, failed: int
) -> dict[str, int]:
    """Line and event accounting for change_events (they add up; see README 'Counts'); `failed`: files that failed
    on their own, whose lines are not read."""
    whole_files = int(pc.sum(pc.equal(read.quarantine["source_line"], 0)).as_py() or 0)
    oversized = read.quarantine.num_rows - whole_files
    dups = int(pc.sum(marked["is_duplicate"]).as_py() or 0)
    kept = pc.invert(marked["is_duplicate"])
    replicated = pc.is_in(marked["entity"], value_set=pa.array(list(schemas), pa.string()))
    return {
        "files": len(files),
        "files_quarantined": whole_files,
        "files_failed": failed,
        "lines_read": read.lines.num_rows + oversized + read.blank_lines,
        "lines_quarantined": bad.num_rows - whole_files - failed,
        "lines_blank": read.blank_lines,
        "events_parsed": marked.num_rows,
        "duplicates": dups,
        "ingested": marked.num_rows - dups,
        "ignored": int(pc.sum(pc.and_(kept, pc.invert(replicated))).as_py() or 0),
    }
