"""Bulk API 2.0 query jobs: create, poll, page through CSV results with ``Sforce-Locator``.

A job runs in a background thread over its own read-only SQLite connection (a consistent snapshot even while
the org keeps changing) and streams its CSV to a file under the data directory, remembering the byte offset of
every row. A result page is then a byte range of that file plus the header line: constant memory, whatever the
size of the object. Values follow Bulk API CSV: every value quoted, null as an empty unquoted cell, datetimes
``2025-11-22T08:26:40.000Z``, booleans ``true``/``false``.

Since API version 58.0 a complete job also offers its results as parallel result pages (Bulk API 2.0 guide, "Get
Parallel Results for a Query Job"): ``GET jobs/query/<id>/resultPages`` answers with up to five ``resultUrl``s
(each the results URI with its own locator, pages of ``Api.result_page_records`` records), ``nextRecordsUrl`` for
the next five and ``done``; a client may fetch those pages at once. An object registered with
``Emulator.add_bulk_object`` has no rows in the store: its job completes at once and each page is generated from
its row range (``bulk_synthetic.py``).

What a real org refuses, refused alike: an object Bulk API does not support (``SObject.bulk`` false: job creation
answers 400 ``INVALIDENTITY`` "Entity 'X' is not supported by the Bulk API.", as Airbyte's logs of real orgs show
it, airbytehq/airbyte#7518) and a query naming a binary (``base64``) field (the job is accepted and then ``Failed``
with ``errorMessage`` "FeatureNotEnabled : Binary field not supported", Bulk API's message for it).
"""

from __future__ import annotations

import logging
import threading
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from salesforce_emulator import ids, soql
from salesforce_emulator.errors import ApiError, not_found
from salesforce_emulator.schema import derived_value
from salesforce_emulator.server import Request, Response, route
from salesforce_emulator.store import reader_related
from salesforce_emulator.values import ms_to_iso, to_csv

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 50_000
# What Bulk API answers a query naming a base64 field (Salesforce Help 000382669, "Batch failed: FeatureNotEnabled:
# Binary field not supported"; SFDO-Tooling/CumulusCI#1662): the job fails with it.
BINARY_NOT_SUPPORTED = "FeatureNotEnabled : Binary field not supported"
_DELIMITERS = {"COMMA": ",", "TAB": "\t", "PIPE": "|", "SEMICOLON": ";", "CARET": "^", "BACKQUOTE": "`"}
_job_counter = iter(range(1, 1 << 62))


@dataclass
class Job:
    id: str
    operation: str
    query: soql.Query
    path: Path
    delimiter: str
    line_ending: str
    created: str
    state: str = "UploadComplete"
    error: str | None = None
    offsets: array = field(default_factory=lambda: array("q"))
    header: bytes = b""
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    generated: Any = None  # a bulk_synthetic.BulkObject: pages computed from their row range, no file
    records: int = 0

    @property
    def total(self) -> int:
        return self.records if self.generated is not None else max(len(self.offsets) - 1, 0)

    def info(self, api: Api) -> dict[str, Any]:
        return {
            "id": self.id,
            "operation": self.operation,
            "object": self.query.obj.name,
            "createdById": api.store.default_user_id,
            "createdDate": self.created,
            "systemModstamp": self.created,
            "state": self.state,
            "concurrencyMode": "Parallel",
            "contentType": "CSV",
            "apiVersion": float(api.api_version),
            "jobType": "V2Query",
            "lineEnding": "CRLF" if self.line_ending == "\r\n" else "LF",
            "columnDelimiter": next(k for k, v in _DELIMITERS.items() if v == self.delimiter),
            "numberRecordsProcessed": self.total,
            "retries": 0,
            "totalProcessingTime": int(((self.finished or time.monotonic()) - self.started) * 1000),
            **({"errorMessage": self.error} if self.error else {}),
        }


def _csv_row(values: list[str | None], delimiter: str, line_ending: str) -> bytes:
    cells = ("" if v is None else '"' + v.replace('"', '""') + '"' for v in values)
    return (delimiter.join(cells) + line_ending).encode()


def _run(api: Api, job: Job) -> None:
    job.state = "InProgress"
    query = job.query
    try:
        sql, params = query.sql(include_deleted=job.operation == "queryAll")
        conn = api.store.open_reader()
        related = reader_related(conn)  # cross-object formulas read the job's snapshot too
        try:
            with job.path.open("wb") as out:
                job.header = _csv_row([f.name for f in query.fields], job.delimiter, job.line_ending)
                position = 0
                for row in conn.execute(sql, params):
                    if job.state == "Aborted":
                        return
                    data = dict(row)
                    values = [
                        to_csv(f.type, data[f.name] if f.stored else derived_value(query.obj, f, data, related))
                        for f in query.fields
                    ]
                    job.offsets.append(position)
                    line = _csv_row(values, job.delimiter, job.line_ending)
                    out.write(line)
                    position += len(line)
                job.offsets.append(position)
        finally:
            conn.close()
        job.state = "JobComplete"
    except Exception as exc:  # a failed job reports its error through the job state, as Salesforce does
        log.exception("bulk query job %s failed", job.id)
        job.error, job.state = str(exc), "Failed"
    finally:
        job.finished = time.monotonic()


def create_job(api: Api, req: Request) -> Response:
    body = req.json() or {}
    operation = body.get("operation")
    if operation not in ("query", "queryAll"):
        raise ApiError(400, "INVALIDJOB", f"Invalid operation '{operation}': use query or queryAll")
    query = soql.parse(body.get("query") or "", api.finder(req))
    if query.count_only:
        raise ApiError(400, "INVALIDJOB", "COUNT() is not supported by Bulk API query jobs")
    if not query.obj.bulk:  # as a real org refuses such an object (schema.SObject.bulk)
        raise ApiError(400, "INVALIDENTITY", f"Entity '{query.obj.name}' is not supported by the Bulk API.")
    compound = [f.name for f in query.fields if f.type == "address"]
    if compound:
        raise ApiError(400, "INVALIDJOB", f"Compound fields are not supported by Bulk API: {', '.join(compound)}")
    delimiter = _DELIMITERS.get(body.get("columnDelimiter", "COMMA"))
    if delimiter is None:
        raise ApiError(400, "INVALIDJOB", f"Unknown columnDelimiter {body.get('columnDelimiter')}")
    job_id = ids.make_id("750", next(_job_counter))
    api.bulk_dir.mkdir(parents=True, exist_ok=True)
    job = Job(
        job_id,
        operation,
        query,
        api.bulk_dir / f"{job_id}.csv",
        delimiter,
        "\r\n" if body.get("lineEnding") == "CRLF" else "\n",
        ms_to_iso(int(time.time() * 1000)),
    )
    with api.lock:
        api.jobs[job_id] = job
    if any(f.type == "base64" for f in query.fields):
        # Accepted, then failed as Bulk API fails a query naming a binary field (its batch state message)
        job.error, job.state, job.finished = BINARY_NOT_SUPPORTED, "Failed", time.monotonic()
        return Response(200, job.info(api))
    if (generated := api.bulk_objects.get(query.obj.name)) is not None:
        if query.where_sql or query.limit is not None or query.offset or query.order_sql != "Id":
            raise ApiError(400, "INVALIDJOB", f"{query.obj.name} is generated: only SELECT <fields> FROM it")
        job.generated, job.records, job.state = generated, generated.records, "JobComplete"
        job.header = _csv_row([f.name for f in query.fields], delimiter, job.line_ending)
        job.finished = time.monotonic()
        return Response(200, job.info(api))
    threading.Thread(target=_run, args=(api, job), name=f"bulk-{job_id}", daemon=True).start()
    return Response(200, job.info(api))


def _job(api: Api, req: Request) -> Job:
    job = api.jobs.get(req.params["job"])
    if job is None:
        raise not_found(f"Job {req.params['job']} not found")
    return job


def job_status(api: Api, req: Request) -> Response:
    return Response(body=_job(api, req).info(api))


def list_jobs(api: Api, req: Request) -> Response:
    return Response(
        body={"done": True, "records": [j.info(api) for j in list(api.jobs.values())], "nextRecordsUrl": None}
    )


def abort_job(api: Api, req: Request) -> Response:
    job = _job(api, req)
    if (req.json() or {}).get("state") != "Aborted":
        raise ApiError(400, "INVALIDJOB", "Only state Aborted can be set on a query job")
    if job.state not in ("JobComplete", "Failed"):
        job.state = "Aborted"
    return Response(body=job.info(api))


def delete_job(api: Api, req: Request) -> Response:
    job = _job(api, req)
    with api.lock:
        api.jobs.pop(job.id, None)
    job.path.unlink(missing_ok=True)
    return Response(204)


def results(api: Api, req: Request) -> Response:
    job = _job(api, req)
    if job.state != "JobComplete":
        raise ApiError(400, "INVALIDJOB", f"Job {job.id} is not complete (state {job.state})")
    max_records = req.arg("maxRecords")
    if max_records is not None and (not max_records.isdigit() or int(max_records) < 1):
        raise ApiError(400, "INVALIDJOB", "maxRecords must be a positive integer")
    page = int(max_records) if max_records else DEFAULT_MAX_RECORDS
    locator = req.arg("locator") or ""
    try:
        start = _decode_locator(locator) if locator and locator != "null" else 0
    except ValueError:
        raise ApiError(400, "INVALIDLOCATOR", f"Invalid locator: {locator}") from None
    total = job.total
    if start > total:
        raise ApiError(400, "INVALIDLOCATOR", f"Invalid locator: {locator}")
    end = min(start + page, total)
    if job.generated is not None:
        chunk = job.generated.page(start, end, job.query.fields, job.delimiter, job.line_ending)
    else:
        with job.path.open("rb") as handle:
            handle.seek(job.offsets[start])
            chunk = handle.read(job.offsets[end] - job.offsets[start])
    next_locator = _locator(end) if end < total else "null"
    return Response(
        body=job.header + chunk,
        content_type="text/csv",
        headers={"Sforce-Locator": next_locator, "Sforce-NumberOfRecords": str(end - start)},
    )


PARALLEL_SINCE = (58, 0)
PARALLEL_PAGES = 5  # resultUrls per resultPages response


def result_pages(api: Api, req: Request) -> Response:
    """Up to five result URIs of a complete job (API 58.0+), from the page the locator names."""
    if tuple(int(p) for p in req.version.split(".")) < PARALLEL_SINCE:
        raise not_found(f"resultPages is available in API version 58.0 and later, not {req.version}")
    job = _job(api, req)
    if job.state != "JobComplete":
        raise ApiError(400, "INVALIDJOB", f"Job {job.id} is not complete (state {job.state})")
    locator = req.arg("locator") or ""
    try:
        start = _decode_locator(locator) if locator else 0
    except ValueError:
        raise ApiError(400, "INVALIDLOCATOR", f"Invalid locator: {locator}") from None
    page, total = api.result_page_records, job.total
    base = f"/services/data/v{req.version}/jobs/query/{job.id}"
    starts = list(range(start, total, page))[:PARALLEL_PAGES] or ([0] if start == 0 else [])
    urls = [
        {"resultUrl": f"{base}/results?maxRecords={page}" + (f"&locator={_locator(s)}" if s else "")} for s in starts
    ]
    after = starts[-1] + page if starts else total
    done = after >= total
    return Response(
        body={
            "resultPages": urls,
            "done": done,
            "nextRecordsUrl": None if done else f"{base}/resultPages?locator={_locator(after)}",
        }
    )


def _locator(start: int) -> str:
    return ids.to_base62(start, width=1, fixed=False)


def _decode_locator(locator: str) -> int:
    value = 0
    for char in locator:
        digit = ids.BASE62.find(char)
        if digit < 0:
            raise ValueError(locator)
        value = value * 62 + digit
    return value


ROUTES = [
    route("POST", "/jobs/query", "bulk_query_job", create_job),
    route("GET", "/jobs/query", "bulk_job_status", list_jobs),
    route("GET", r"/jobs/query/(?P<job>\w+)", "bulk_job_status", job_status),
    route("PATCH", r"/jobs/query/(?P<job>\w+)", "bulk_job_status", abort_job),
    route("DELETE", r"/jobs/query/(?P<job>\w+)", "bulk_job_delete", delete_job),
    route("GET", r"/jobs/query/(?P<job>\w+)/results", "bulk_results", results),
    route("GET", r"/jobs/query/(?P<job>\w+)/resultPages", "bulk_result_pages", result_pages),
]
