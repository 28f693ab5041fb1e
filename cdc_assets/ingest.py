"""Landing files -> change_events, exactly once (design §4, §5, §9).

One run ingests every landing file that no change_events commit has ingested yet, in batches of files of at most
`max_batch_bytes` together (a backlog of any size is read a bounded slice at a time; a larger file is a batch of
its own). For each batch:

1. list files; a file is ingested iff a change_events commit carries the app transaction `landing:<path>`;
2. read and parse the lines on Spark, each file in its format (CometD, or Datastream's: spark_ops/datastream.py);
   bad lines (and unreadable files) go to `_quarantine`, keyed by (file, line) so a re-run inserts nothing twice;
3. drop events already stored (same identity and record, looked up only in the touched entities and commit-time
   range, so also those of the batches before) or repeated within the batch;
4. append the rest in **one commit** that also records the batch's files, the new ingest sequence number and the
   newest event seen so far, with what closes transactions (§5, `cdc_assets/closure.py`).

A crash before a batch's step 4 leaves none of its files ingested; a crash after it leaves all of them ingested.
Either way the next run produces the same table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from cdc_assets.closure import ingest_progress
from cdc_assets.damaged import resync_lines
from cdc_assets.faults import fault_point
from cdc_assets.quarantine import record_quarantine
from cdc_assets.schemas import redacts
from cdc_assets.state import Q_STATE, IngestState
from cdc_assets.timing import Stopwatch
from resources.delta import CHANGE_EVENTS, DeltaWarehouse
from resources.landing_zone import LandingFile, LandingZone, entities_named
from resources.spark import from_arrow, small_query
from spark_ops.events import DEDUP_KEY
from spark_ops.datastream import parse_landed
from spark_ops.parse import CHANGE_COLUMNS, landed_rows
from spark_ops.schema import ObjectSchema

log = logging.getLogger(__name__)

SEQ_APP = "change_events"


def file_app_id(f: LandingFile) -> str:
    return f"landing:{f.path}"


@dataclass
class IngestResult:
    files: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    state: IngestState = field(default_factory=IngestState)
    version: int | None = None
    quarantine_examples: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


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
        parts.append(warehouse.read(table, partitions=[("entity", "=", b["entity"])], filter=flt, columns=DEDUP_KEY,
                                    prune=[("commit_ts", ">=", lo.as_py()), ("commit_ts", "<=", hi.as_py())]))
    known = pa.concat_tables(parts) if parts else None
    if known is None or not known.num_rows:
        return pa.repeat(pa.scalar(False), rows.num_rows)
    return pc.is_in(_dedup_key(rows), value_set=_dedup_key(known))


def _dedup_key(rows: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(*(rows[k].cast(pa.string()) for k in DEDUP_KEY), "\x00")


MAX_BATCH_BYTES = 128 * 1024 * 1024


def batches(files: list[LandingFile], max_bytes: int) -> list[list[LandingFile]]:
    """`files` in order, cut into runs of at most `max_bytes` together (a larger file alone)."""
    out: list[list[LandingFile]] = []
    size = 0
    for f in files:
        if not out or size + f.size > max_bytes:
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.size
    return out


def ingest(spark: SparkSession, warehouse: DeltaWarehouse, landing: LandingZone,
           schemas: Mapping[str, ObjectSchema], run_id: str, now: datetime | None = None,
           max_batch_bytes: int = MAX_BATCH_BYTES) -> IngestResult:
    """Ingest every pending landing file, one commit per batch; the counts and timings of all batches summed.
    `schemas`: the replicated objects' schemas by name; only those a batch's lines name are looked up (a lazy
    mapping, `cdc_assets.schemas.SchemaCatalog`, resolves no others)."""
    now = now or datetime.now(timezone.utc)
    total = IngestResult(counts=_zero_counts())
    for batch in batches(pending_files(warehouse, landing), max_batch_bytes):
        result = _ingest_batch(spark, warehouse, landing, batch, schemas, run_id, now)
        total.files += result.files
        total.counts = {k: total.counts[k] + v for k, v in result.counts.items()}
        total.state, total.version = result.state, result.version
        total.quarantine_examples = (total.quarantine_examples + result.quarantine_examples)[:5]
        total.seconds = {k: total.seconds.get(k, 0.0) + result.seconds.get(k, 0.0)
                         for k in {*total.seconds, *result.seconds}}
    return total


def _ingest_batch(spark: SparkSession, warehouse: DeltaWarehouse, landing: LandingZone, files: list[LandingFile],
                  schemas: Mapping[str, ObjectSchema], run_id: str, now: datetime) -> IngestResult:
    watch = Stopwatch()
    # The snapshot this batch reads its checkpoint from and commits against (DeltaWarehouse.append): if another
    # writer commits in between, this commit fails instead of ingesting the same files twice.
    events = warehouse.table(CHANGE_EVENTS)
    done = [f for f in files if events is not None and events.transaction_version(file_app_id(f)) is not None]
    if done:
        log.warning("%d landing files were ingested by another run meanwhile; skipped", len(done))
        files = [f for f in files if f not in done]
        if not files:
            return IngestResult(counts=_zero_counts(), state=IngestState.read(warehouse, events),
                                version=events.version())
    read = landing.read(files)
    # A file that lost content asks a resync of the objects it names, as an overflow does (cdc_assets/damaged.py).
    lines = pa.concat_tables([read.lines, resync_lines(read.damaged, files, replicated=schemas, at=now)])
    # Only the objects these lines name: the parse has a branch per object, and describing objects the batch does
    # not touch (hundreds, in a large org) would make every run's cost follow the number of objects replicated.
    redact = redacts(schemas)
    schemas = {e: schemas[e] for e in sorted(entities_named(lines["raw"])) if e in schemas}
    watch.lap("read")
    fault_point("ingest.after_read")
    # CometD and Datastream files (spark_ops/datastream.py); one Spark job parses every line once, explodes the
    # change rows and marks those repeated within the batch.
    with small_query(spark, lines.num_rows):  # a landing run of a few lines: its fixed cost (resources/spark.py)
        landed = landed_rows(parse_landed(from_arrow(spark, lines), schemas)).toArrow()
    quarantine = landed["quarantine"]
    bad_lines = landed.filter(quarantine)
    gapped = int(pc.sum(bad_lines["gapped"]).as_py() or 0)
    bad = pa.concat_tables([bad_lines.select(read.quarantine.schema.names).cast(read.quarantine.schema),
                            read.quarantine])
    watch.lap("parse")
    fault_point("ingest.after_parse")
    record_quarantine(warehouse, bad, run_id=run_id, now=now, key=Q_STATE, schemas=schemas, redact=redact)
    fault_point("ingest.after_quarantine")

    rows = landed.filter(pc.invert(quarantine)).drop_columns(["quarantine", "raw", "reason", "gapped"])
    marked = rows.set_column(rows.schema.get_field_index("is_duplicate"), "is_duplicate",
                             pc.or_(rows["is_duplicate"], _stored(warehouse, rows)))
    watch.lap("dedup")
    fault_point("ingest.after_dedup")
    previous = IngestState.read(warehouse, events)
    seq = previous.ingest_seq + 1
    fresh_arrow = marked.filter(pc.invert(marked["is_duplicate"])).select(CHANGE_COLUMNS)
    fresh_arrow = fresh_arrow.append_column("_ingest_seq", pa.repeat(pa.scalar(seq, pa.int64()), fresh_arrow.num_rows)) \
        .append_column("_ingested_at", pa.repeat(pa.scalar(now, pa.timestamp("us", tz="UTC")), fresh_arrow.num_rows))

    counts = _count(files, read, bad, marked, schemas) | {"lines_gapped": gapped}
    # The newest event and the close timer (cdc_assets/closure.py), then what this batch was.
    state = replace(ingest_progress(previous, fresh_arrow, seq, now), files=[f.path for f in files], counts=counts,
                    run_id=run_id)
    # A landing file's app transaction may expire once upkeep has retired the file (cdc_assets/upkeep/landing.py).
    fault_point("ingest.before_commit")
    table = warehouse.append(CHANGE_EVENTS, fresh_arrow, read=events, partition_by=["entity"], key=state.KEY,
                             state=state.to_dict(), txns={SEQ_APP: seq}, expiring={file_app_id(f): 1 for f in files})
    watch.lap("write")
    fault_point("ingest.after_commit")
    return IngestResult(files=state.files, counts=counts, state=state, version=table.version(),
                        quarantine_examples=[f"{r['source_file']}:{r['source_line']}: {r['reason']}"
                                             for r in bad.slice(0, 5).to_pylist()], seconds=watch.seconds)


def _zero_counts() -> dict[str, int]:
    return {k: 0 for k in ("files", "files_quarantined", "lines_read", "lines_quarantined", "lines_blank",
                           "lines_gapped", "events_parsed", "duplicates", "ingested", "ignored")}


def _count(files: list[LandingFile], read, bad: pa.Table, marked: pa.Table,
           schemas: Mapping[str, ObjectSchema]) -> dict[str, int]:
    """Line and event accounting for change_events (they add up; see README 'Counts')."""
    whole_files = int(pc.sum(pc.equal(read.quarantine["source_line"], 0)).as_py() or 0)
    oversized = read.quarantine.num_rows - whole_files
    dups = int(pc.sum(marked["is_duplicate"]).as_py() or 0)
    kept = pc.invert(marked["is_duplicate"])
    replicated = pc.is_in(marked["entity"], value_set=pa.array(list(schemas), pa.string()))
    return {
        "files": len(files),
        "files_quarantined": whole_files,
        "lines_read": read.lines.num_rows + oversized + read.blank_lines,
        "lines_quarantined": bad.num_rows - whole_files,
        "lines_blank": read.blank_lines,
        "events_parsed": marked.num_rows,
        "duplicates": dups,
        "ingested": marked.num_rows - dups,
        "ignored": int(pc.sum(pc.and_(kept, pc.invert(replicated))).as_py() or 0),
    }

