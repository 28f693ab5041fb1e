"""The Salesforce boundary: a Dagster resource over simple-salesforce, with the calls replication needs.

Login flows, chosen by which fields are set (secrets through ``dg.EnvVar``; ``login_flow`` names the choice):

1. ``token``: ``instance_url`` + ``access_token``, used as is (the local emulator's default). It cannot be renewed.
2. ``jwt_bearer``: ``client_id`` + ``username`` + ``private_key_file`` (OAuth 2.0 JWT bearer flow): an assertion
   signed RS256 with the key whose certificate is uploaded to the connected app (``iss`` client id, ``sub``
   username, ``aud`` ``login_url``, ``exp`` in 3 minutes; PyJWT, as simple-salesforce signs it), posted to
   ``<instance_url or login_url>/services/oauth2/token``. simple-salesforce's own JWT login is not used: it
   posts only to ``https://<domain>.salesforce.com``, never to a My Domain or a local URL.
3. ``client_credentials``: ``client_id`` + ``client_secret`` with an ``instance_url`` (the My Domain URL: the
   flow needs it), OAuth 2.0 client credentials (the connected app's execution user);
   ``password``: the same plus ``username`` / ``password`` [+ ``security_token``], the legacy username-password
   flow.
4. ``soap``: ``username`` + ``password`` + ``security_token``: simple-salesforce's SOAP login at
   ``<domain>.salesforce.com``.

Every flow but ``token`` logs in again after the org rejects the session (``relogin``). ``salesforce_resource_
from_env()`` is the one place that switches between the local emulator and a real org.

Helpers: ``describe`` / ``replicated_fields`` (describe minus compound parents, formula fields and the fields change
events never carry), ``retrieve`` (sObject Collections, 2,000 ids per call, ``None`` for ids that are gone),
``query_all`` (REST queryAll, paged by simple-salesforce's ``query_all_iter``), ``bulk_query_all`` (Bulk API 2.0
queryAll, one CSV result page at a time parsed into Arrow record batches of strings, never the whole object in
memory; an object Bulk API refuses, ``INVALIDENTITY``, is read through REST queryAll instead, same batches) and
``api_usage`` (from the last ``Sforce-Limit-Info`` header). SOQL is built by ``select_soql``, values quoted by
simple-salesforce's ``format_soql``.

Reads retry with exponential backoff on 5xx, timeouts and connection errors (one dropped in the middle of a
response too) through urllib3's ``Retry`` mounted on the session, simple-salesforce's own calls included
(``Retry-After`` honoured, each retry logged); a creation is sent once. Tokens and passwords are never logged.

Not used from simple-salesforce: its Bulk API 2.0 query (``sf.bulk2.<Object>.query_all`` / ``download``), which
neither tells the job id and locator of each page (``bulk_query_all`` commits each page with them and resumes a
killed run from them), nor deletes the job, nor takes a timeout, and returns pages as decoded text.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, quote, urlsplit

import dagster as dg
import jwt
import pyarrow as pa
import pyarrow.csv as pa_csv
import requests
from pydantic import PrivateAttr
from requests.adapters import HTTPAdapter
from simple_salesforce import Salesforce, format_soql
from simple_salesforce.exceptions import SalesforceError
from urllib3.exceptions import MaxRetryError, ProtocolError
from urllib3.util.retry import Retry

from object_schema.describe import BINARY_TYPES, NOT_IN_EVENTS
from resources.deployment import DeploymentOwned
from resources.network import is_loopback
from shared.names import is_record_id

log = logging.getLogger(__name__)

LOCAL_INSTANCE_URL = "https://127.0.0.1:8443"
LOCAL_ACCESS_TOKEN = "dev-token"
LOCAL_CA_BUNDLE = ".demo/salesforce/tls/ca.pem"
RETRIEVE_BATCH = 2000
COMPOSITE_SUBREQUESTS = 25  # the most subrequests one REST Composite call takes
REFUSED_ID_ERRORS = frozenset({"MALFORMED_ID", "INVALID_ID_FIELD"})  # the org's "this is no id": see `retrieve`
# A Bulk API 2.0 query job refused for its object ("Entity 'X' is not supported by the Bulk API."): `bulk_query_all`
# reads such an object through REST instead, as a position without a job (`REST_READ`), 2,000 records a call.
BULK_REFUSED_ENTITY = "INVALIDENTITY"
REST_READ = "rest"
REST_QUERY_PAGE = 2000
NOT_AN_ID = "not a Salesforce id (15 or 18 letters and digits): not sent to the org"
ENV_VARS = {
    "instance_url": "SF_INSTANCE_URL",
    "access_token": "SF_ACCESS_TOKEN",
    "username": "SF_USERNAME",
    "password": "SF_PASSWORD",
    "security_token": "SF_SECURITY_TOKEN",
    "client_id": "SF_CLIENT_ID",
    "client_secret": "SF_CLIENT_SECRET",
    "domain": "SF_DOMAIN",
    "ca_bundle": "SF_CA_BUNDLE",
    "api_version": "SF_API_VERSION",
    "private_key_file": "SF_PRIVATE_KEY_FILE",
    "login_url": "SF_LOGIN_URL",
}
DEFAULT_LOGIN_URL = "https://login.salesforce.com"  # a sandbox: https://test.salesforce.com
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
JWT_LIFETIME_SECONDS = 180  # Salesforce wants exp within 3 minutes
_USAGE = re.compile(r"api-usage=(\d+)/(\d+)")


@dataclass(frozen=True)
class BulkPosition:
    """Where a Bulk API 2.0 query job's reading stands: the job, and the locator of the next result page (None: the
    first page, or, after the last page, nothing left)."""

    job_id: str
    locator: str | None


class SalesforceApiError(RuntimeError):
    """A Salesforce call failed for good (after retries, or with a non-retryable status)."""

    def __init__(self, method: str, path: str, status: int, body: str):
        super().__init__(f"Salesforce {method} {path} failed with HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class BulkJobFailed(SalesforceApiError):
    """A Bulk API 2.0 job the org failed or aborted: it gives no results; query again."""


class _LoggedRetry(Retry):
    """urllib3's Retry, saying each retry as a warning (urllib3 logs them at debug level only)."""

    def increment(self, method: str | None = None, url: str | None = None, *args: Any, **kwargs: Any) -> Self:
        retry = super().increment(method, url, *args, **kwargs)  # raises MaxRetryError once the retries are spent
        last = retry.history[-1]
        reason = f"HTTP {last.status}" if last.status else type(last.error).__name__
        done = len(retry.history)
        log.warning("Salesforce %s %s: %s; retry %d/%d", method, url, reason, done, done + (retry.total or 0))
        return retry


class _SalesforceSession(requests.Session):
    """Every call through ``retry`` (urllib3's Retry on the adapter), a body cut in the middle too; ``verify`` wins
    over REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment."""

    def __init__(self, retry: Retry):
        super().__init__()
        self.retry = retry
        for prefix in ("https://", "http://"):
            self.mount(prefix, HTTPAdapter(max_retries=retry))

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        retry = self.retry
        while True:
            try:
                return super().send(request, **kwargs)
            # The connection dropped in the middle of the body (an IncompleteRead): requests reads a body after the
            # adapter's Retry has handed the response over, so it is counted here as the read error it is.
            except requests.exceptions.ChunkedEncodingError as exc:
                try:
                    retry = retry.increment(request.method, request.url, error=exc.args[0])
                except (MaxRetryError, ProtocolError):  # retries spent, or a method Retry does not repeat
                    raise exc from None
                retry.sleep()

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        if verify is None or verify is True:
            settings["verify"] = self.verify
        return settings


class SalesforceResource(DeploymentOwned):
    """A Salesforce org (by default the local emulator) reached through simple-salesforce."""

    # Which org and whose login: the code location's environment says, never a run (resources/deployment.py).
    DEPLOYMENT_FIELDS = frozenset(
        {
            "instance_url",
            "access_token",
            "username",
            "password",
            "security_token",
            "client_id",
            "client_secret",
            "private_key_file",
            "login_url",
            "domain",
            "ca_bundle",
        }
    )

    instance_url: str | None = LOCAL_INSTANCE_URL
    access_token: str | None = None
    username: str | None = None
    password: str | None = None
    security_token: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    private_key_file: str | None = None  # JWT bearer flow: the key whose certificate the connected app holds
    login_url: str | None = None  # JWT bearer flow: the audience (default https://login.salesforce.com)
    domain: str | None = None
    ca_bundle: str | None = None
    api_version: str = "59.0"
    timeout_seconds: float = 60.0
    max_retries: int = 4  # retries of a read (urllib3 Retry's total)
    retry_backoff_seconds: float = 0.5  # urllib3 Retry's backoff_factor: waits 0, 2x, 4x, 8x this (or Retry-After)

    _client: Salesforce | None = PrivateAttr(default=None)
    _usage: dict[str, int] = PrivateAttr(default_factory=dict)
    _describes: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)
    _post_reads: requests.Session | None = PrivateAttr(default=None)
    _identity: dict[str, str] | None = PrivateAttr(default=None)

    # -- connection ---------------------------------------------------------------------------------
    def _session(self, retry_methods: frozenset[str] | None = Retry.DEFAULT_ALLOWED_METHODS) -> requests.Session:
        """A session that retries 5xx answers and read errors of `retry_methods` (None: every method) and
        connection failures of any (nothing was sent), with exponential backoff."""
        session = _SalesforceSession(
            _LoggedRetry(
                total=self.max_retries,
                backoff_factor=self.retry_backoff_seconds,
                allowed_methods=retry_methods,
                status_forcelist=frozenset(range(500, 600)),
                raise_on_status=False,
            )
        )  # the last 5xx answer comes back: SalesforceApiError names it
        session.verify = self.ca_bundle or True
        session.hooks["response"].append(self._remember_usage)
        return session

    def _remember_usage(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        match = _USAGE.search(response.headers.get("Sforce-Limit-Info", ""))
        if match:
            self._usage.update(used=int(match.group(1)), limit=int(match.group(2)))

    def client(self) -> Salesforce:
        """The simple-salesforce client (created once per resource instance)."""
        if self._client is None:
            self._client = self._connect()
        return self._client

    def session(self) -> tuple[str, str]:
        """(access token, instance URL) of the current session, logging in first if needed: what the Pub/Sub API
        wants in its call metadata."""
        sf = self.client()
        return sf.session_id, f"https://{sf.sf_instance}"

    def relogin(self) -> None:
        """Forget the session: the next call logs in again (after the org rejected an expired token)."""
        self._client = None

    @property
    def login_flow(self) -> str:
        """Which login flow the set fields choose (module docstring): token, jwt_bearer, client_credentials,
        password or soap; raises ValueError naming the variables to set when none fits."""
        flow = login_flow({name: getattr(self, name) for name in ENV_VARS})
        if flow is None:
            raise ValueError(f"SalesforceResource cannot log in: {MISSING_CREDENTIALS}")
        return flow

    def _connect(self) -> Salesforce:
        check_urls({name: getattr(self, name) for name in URL_FIELDS})
        session = self._session()
        flow = self.login_flow
        if flow == "token":
            if not self.instance_url:
                raise ValueError("SalesforceResource: access_token needs instance_url (SF_INSTANCE_URL)")
            return Salesforce(
                instance_url=self.instance_url, session_id=self.access_token, session=session, version=self.api_version
            )
        if flow == "soap":
            return Salesforce(
                username=self.username,
                password=self.password,
                security_token=self.security_token or "",
                domain=self.domain,
                session=session,
                version=self.api_version,
            )
        token, instance_url = self._oauth_token(session, flow)
        return Salesforce(instance_url=instance_url, session_id=token, session=session, version=self.api_version)

    def _oauth_form(self, flow: str) -> dict[str, str]:
        if flow == "jwt_bearer":
            key = Path(str(self.private_key_file)).read_bytes()
            claims = {
                "iss": self.client_id,
                "sub": self.username,
                "aud": self.login_url or DEFAULT_LOGIN_URL,
                "exp": int(time.time()) + JWT_LIFETIME_SECONDS,
            }
            return {"grant_type": JWT_BEARER, "assertion": jwt.encode(claims, key, algorithm="RS256")}
        form = {"client_id": str(self.client_id), "client_secret": str(self.client_secret)}
        if flow == "password":
            return form | {
                "grant_type": "password",
                "username": str(self.username),
                "password": str(self.password) + (self.security_token or ""),
            }
        return form | {"grant_type": "client_credentials"}

    def _oauth_token(self, session: requests.Session, flow: str) -> tuple[str, str]:
        endpoint = self.instance_url or self.login_url or DEFAULT_LOGIN_URL
        url = f"{str(endpoint).rstrip('/')}/services/oauth2/token"
        response = session.post(url, data=self._oauth_form(flow), timeout=self.timeout_seconds)
        if response.status_code != 200:
            # The body names the OAuth error (invalid_client, invalid_grant); it never echoes the secret.
            raise SalesforceApiError(
                "POST", f"/services/oauth2/token ({flow} flow)", response.status_code, response.text
            )
        body = response.json()
        log.info("Salesforce OAuth %s login succeeded for %s", flow, body.get("instance_url"))
        return body["access_token"], body.get("instance_url") or str(self.instance_url)

    # -- HTTP with retries --------------------------------------------------------------------------
    def _request(self, method: str, path: str, *, retry: bool = True, **kwargs: Any) -> requests.Response:
        """Call ``path`` (relative to /services/data/vXX.X/, or absolute from /services/...). ``retry``: the call
        is a read, retried on 5xx, timeouts and dropped connections whatever its method (sObject Collections reads
        by POST); otherwise a POST is sent once (only a connection that never opened is tried again)."""
        sf = self.client()
        url = f"https://{sf.sf_instance}{path}" if path.startswith("/") else sf.base_url + path
        session = sf.session
        if retry and method not in Retry.DEFAULT_ALLOWED_METHODS:
            if self._post_reads is None:
                self._post_reads = self._session(retry_methods=None)
            session = self._post_reads
        response = session.request(method, url, headers=sf.headers, timeout=self.timeout_seconds, **kwargs)
        if response.status_code >= 300:
            raise SalesforceApiError(method, path, response.status_code, response.text)
        return response

    # -- metadata -----------------------------------------------------------------------------------
    def org_identity(self) -> dict[str, str]:
        """Which org this resource reads (asked once per resource instance): ``org_id`` (the 18-character
        ``organization_id`` of ``/services/oauth2/userinfo``; a sandbox refresh gives a new one), ``instance_url``
        (of the session) and ``api_version``."""
        if self._identity is None:
            info = self._request("GET", "/services/oauth2/userinfo").json()
            self._identity = {
                "org_id": str(info["organization_id"]),
                "instance_url": self.session()[1],
                "api_version": self.api_version,
            }
        return dict(self._identity)

    def describe(self, object_name: str) -> dict[str, Any]:
        if object_name not in self._describes:
            self._describes[object_name] = self._request("GET", f"sobjects/{object_name}/describe").json()
        return self._describes[object_name]

    def describe_fresh(self, object_name: str) -> dict[str, Any]:
        """describe() asked of the org now, not the copy this resource kept: a field deleted in the org, or hidden
        from the integration user by field-level security, has left it since."""
        self._describes.pop(object_name, None)
        return self.describe(object_name)

    def event_schema_fields(self, object_name: str) -> set[str] | None:
        """The top-level field names of the object's change event schema (REST API "Platform Event Schema by Event
        Name": ``sobjects/<Object>ChangeEvent/eventSchema``, a custom object's ``<Name>__ChangeEvent``), which lists
        every field of the object, also those field-level security hides from this user (Change Data Capture
        Developer Guide, "Field-Level Security"). None: the object has no change event."""
        event = f"{object_name[:-3]}__ChangeEvent" if object_name.endswith("__c") else f"{object_name}ChangeEvent"
        try:
            schema = self._request("GET", f"sobjects/{event}/eventSchema", params={"payloadFormat": "COMPACT"}).json()
        except SalesforceApiError as exc:
            if exc.status == 404:
                return None
            raise
        return {f["name"] for f in schema.get("fields", []) if f.get("name") != "ChangeEventHeader"}

    def replicated_fields(self, object_name: str) -> list[dict[str, Any]]:
        """describe() fields a replica stores: no compound parents (but a writable one, a person-account org's
        Account.Name, as ObjectSchema keeps it), no formula fields, none that never appear in change events
        (object_schema.describe.NOT_IN_EVENTS: IsDeleted and SystemModstamp become the replica's own system columns,
        derived fields are read like formula fields), no binary ones (object_schema.describe.BINARY_TYPES)."""
        fields = self.describe(object_name)["fields"]
        parents = {f.get("compoundFieldName") for f in fields if f.get("compoundFieldName")}
        return [
            f
            for f in fields
            if (f["name"] not in parents or f.get("createable"))
            and f["name"] not in NOT_IN_EVENTS
            and not f.get("calculated")
            and f.get("type") not in ("address", "location")
            and f.get("type") not in BINARY_TYPES
        ]

    # -- reads --------------------------------------------------------------------------------------
    def retrieve(
        self, object_name: str, ids: Iterable[str], fields: list[str], refused: dict[str, str] | None = None
    ) -> Iterator[dict[str, Any] | None]:
        """Records by id, in the order given, ``None`` for ids that are unknown or deleted; one sObject
        Collections call per 2,000 ids. ``attributes`` is dropped from each record.

        An id the org refuses (``REFUSED_ID_ERRORS``: a malformed id, such as an 18-character id whose case-safe
        suffix is wrong) fails the whole call that holds it, with the error naming it. Such ids are isolated
        (``_retrieve_isolating``) so the others are still read; they come back ``None`` and are added to
        ``refused`` with the org's error. An id without an id's form (``shared.names.is_record_id``) is refused
        without asking."""
        refused = {} if refused is None else refused
        window: list[str] = []
        for record_id in ids:
            window.append(record_id)
            if len(window) == RETRIEVE_BATCH:
                yield from self._retrieve_window(object_name, window, fields, refused)
                window = []
        if window:
            yield from self._retrieve_window(object_name, window, fields, refused)

    def _retrieve_window(
        self, object_name: str, ids: list[str], fields: list[str], refused: dict[str, str]
    ) -> list[dict[str, Any] | None]:
        asked = [i for i in ids if is_record_id(i)]
        refused |= {i: NOT_AN_ID for i in ids if not is_record_id(i)}
        records = dict(zip(asked, self._retrieve_isolating(object_name, asked, fields, refused) if asked else []))
        return [records.get(i) for i in ids]

    def _retrieve_isolating(
        self, object_name: str, ids: list[str], fields: list[str], refused: dict[str, str]
    ) -> list[dict[str, Any] | None]:
        """``_retrieve_batch``, isolating the ids the org refuses: the ids its error names are asked for alone and
        the rest together; an error naming none of them halves the batch. A refused id alone is recorded in
        ``refused``. Costs a call per refused id (a few more when the org does not name them), never a failure
        of the other ids."""
        try:
            return self._retrieve_batch(object_name, ids, fields)
        except SalesforceApiError as exc:
            error = refused_id_error(exc)
            if error is None:
                raise
        if len(ids) == 1:
            refused[ids[0]] = error
            log.warning("Salesforce refused id %r of %s (%s): it is no record id", ids[0], object_name, error)
            return [None]
        named = [p for p, i in enumerate(ids) if re.search(rf"(?<![A-Za-z0-9]){re.escape(i)}(?![A-Za-z0-9])", error)]
        if 0 < len(named) < len(ids):
            groups = [[p] for p in named] + [[p for p in range(len(ids)) if p not in set(named)]]
        else:
            groups = [list(range(len(ids) // 2)), list(range(len(ids) // 2, len(ids)))]
        out: list[dict[str, Any] | None] = [None] * len(ids)
        for group in groups:
            for p, record in zip(
                group, self._retrieve_isolating(object_name, [ids[p] for p in group], fields, refused)
            ):
                out[p] = record
        return out

    def _retrieve_batch(self, object_name: str, ids: list[str], fields: list[str]) -> list[dict[str, Any] | None]:
        response = self._request("POST", f"composite/sobjects/{object_name}", json={"ids": ids, "fields": fields})
        return [_strip(record) if record is not None else None for record in response.json()]

    def any_rows(self, queries: dict[str, str]) -> dict[str, bool | None]:
        """For each SOQL query of `queries` (by name; each with `LIMIT 1`), whether ``queryAll`` returns a row:
        asked `COMPOSITE_SUBREQUESTS` at a time through the REST Composite resource, one API call each (REST API
        Developer Guide, "Composite": up to 25 subrequests, GET queries among them). None: that subrequest failed
        (a field the org no longer has, ...); the caller reads the object itself, which says why."""
        names, out = list(queries), {}
        for start in range(0, len(names), COMPOSITE_SUBREQUESTS):
            batch = names[start : start + COMPOSITE_SUBREQUESTS]
            requests_ = [
                {
                    "method": "GET",
                    "url": f"/services/data/v{self.api_version}/queryAll/?q={quote(queries[name])}",
                    "referenceId": f"q{i}",
                }
                for i, name in enumerate(batch)
            ]
            response = self._request("POST", "composite", json={"allOrNone": False, "compositeRequest": requests_})
            answers = {a.get("referenceId"): a for a in response.json().get("compositeResponse", [])}
            for i, name in enumerate(batch):
                answer = answers.get(f"q{i}") or {}
                body = answer.get("body")
                found = isinstance(body, dict) and bool(body.get("totalSize") or body.get("records"))
                out[name] = found if answer.get("httpStatusCode") == 200 and isinstance(body, dict) else None
        return out

    def query_all(self, soql: str, include_deleted: bool = True) -> Iterator[dict[str, Any]]:
        """Records of a SOQL query through REST ``queryAll`` (deleted rows included) or ``query``, page by page
        (simple-salesforce's ``query_all_iter``)."""
        try:
            for record in self.client().query_all_iter(
                soql, include_deleted=include_deleted, timeout=self.timeout_seconds
            ):
                yield _strip(record)
        except SalesforceError as exc:
            raise SalesforceApiError(
                "GET", "queryAll" if include_deleted else "query", exc.status, str(exc.content)
            ) from exc

    def bulk_query_all(
        self,
        object_name: str,
        fields: list[str],
        page_size: int = 50_000,
        where: str | None = None,
        poll_seconds: float = 0.2,
        timeout_seconds: float = 3600.0,
        line_ending: str = "LF",
        order_by: str | None = None,
        resume: BulkPosition | None = None,
        on_page: Callable[[BulkPosition], None] | None = None,
        include_deleted: bool = True,
        parallel_pages: int = 1,
    ) -> Iterator[pa.RecordBatch]:
        """Bulk API 2.0 ``queryAll`` (``query`` without ``include_deleted``: live records only) of ``fields``:
        yields Arrow record batches (every column ``pa.string()``,
        null for empty cells), one result page (``page_size`` records) in memory at a time. ``line_ending``
        (``LF`` or ``CRLF``) is the job's record terminator; values keep their own line breaks either way.

        ``parallel_pages`` > 1 (and no ``resume``): the job's parallel result pages (API 58.0+,
        ``jobs/query/<id>/resultPages``: up to five result URIs a call, pages of the org's size) are fetched that many
        at a time and yielded in order, so downloading overlaps parsing with at most that many pages in memory; the
        position after a page is the locator in the next page's URI (a results locator: a resumed read continues
        with locators). An org that does not offer them (HTTP 404, an API version before 58.0) is read page by page
        with locators.

        ``on_page(position)`` is called after a page's batches are yielded and before the next page is asked for,
        with the job id and the next page's locator (``None`` after the last page): a caller that commits each
        page there can continue a killed run with ``resume=position`` (the same job, no new query).

        An object Bulk API 2.0 refuses (job creation answers ``INVALIDENTITY``, "Entity 'X' is not supported by the
        Bulk API.") is read through REST instead (`_rest_pages`): the same batches, `on_page` once at the end.

        The job is deleted once read to its end (or failed in the org). A read that fails midway keeps it when
        ``on_page`` is given, so that the run after it resumes from the last position it committed; without
        ``on_page`` nobody could resume it, and it is deleted. A job the org no longer has (404) is left alone."""
        if resume is None:
            try:
                job_id = self._create_query_job(object_name, fields, where, order_by, line_ending, include_deleted)
            except SalesforceApiError as exc:
                if (refusal := bulk_refusal(exc)) is None:
                    raise
                log.warning(
                    "%s: Bulk API 2.0 refuses the object (%s); reading it through REST %s instead, %d records a "
                    "call, each call counted in the org's daily API budget (api_budget_reserve holds runs back)",
                    object_name,
                    refusal,
                    "queryAll" if include_deleted else "query",
                    REST_QUERY_PAGE,
                )
                yield from self._rest_pages(object_name, fields, where, order_by, include_deleted, page_size, on_page)
                return
        else:
            job_id = resume.job_id
        finished = gone = False  # finished: read to its end, or failed in the org; gone: the org has it no more
        try:
            self._wait_for_job(job_id, poll_seconds, timeout_seconds)
            if parallel_pages > 1 and resume is None:
                pages = yield from self._read_parallel_pages(job_id, fields, parallel_pages, on_page)
                if pages:  # the org offers parallel result pages (API 58.0+) and they are read
                    finished = True
                    log.info(
                        "Bulk queryAll of %s finished: job %s, %d parallel result pages", object_name, job_id, pages
                    )
                    return
            locator = resume.locator if resume else None
            pages = yield from self._read_located_pages(job_id, fields, page_size, locator, on_page)
            finished = True
            log.info("Bulk queryAll of %s finished: job %s, %d result pages", object_name, job_id, pages)
        except BulkJobFailed:
            finished = True
            raise
        except SalesforceApiError as exc:
            if exc.status == 404:
                gone = True  # expired or deleted: nothing to delete
            raise
        finally:
            self._end_job(job_id, finished=finished, gone=gone, resumable=on_page is not None)

    def _rest_pages(
        self,
        object_name: str,
        fields: list[str],
        where: str | None,
        order_by: str | None,
        include_deleted: bool,
        page_size: int,
        on_page: Callable[[BulkPosition], None] | None,
    ) -> Iterator[pa.RecordBatch]:
        """What `bulk_query_all` yields, read through REST ``queryAll`` (``query``) paged by ``nextRecordsUrl``: for an
        object Bulk API 2.0 refuses. Batches of `page_size` records; `on_page` is called once, after the last,
        with `REST_READ` and no locator (a REST read has no job to resume: a killed run reads again)."""
        soql = select_soql(object_name, fields, where=where, order_by=order_by)
        page: list[dict[str, Any]] = []
        for record in self.query_all(soql, include_deleted=include_deleted):
            page.append(record)
            if len(page) == page_size:
                yield rest_text_batch(page, fields)
                page = []
        if page:
            yield rest_text_batch(page, fields)
        if on_page is not None:
            on_page(BulkPosition(REST_READ, None))

    def _create_query_job(
        self,
        object_name: str,
        fields: list[str],
        where: str | None,
        order_by: str | None,
        line_ending: str,
        include_deleted: bool,
    ) -> str:
        """A new Bulk API 2.0 query job (``queryAll``, or ``query`` without ``include_deleted``) of ``fields``, CSV
        results; its id. Not retried: a retried POST could start a second job."""
        job = {
            "operation": "queryAll" if include_deleted else "query",
            "query": select_soql(object_name, fields, where=where, order_by=order_by),
            "contentType": "CSV",
            "columnDelimiter": "COMMA",
            "lineEnding": line_ending,
        }
        return self._request("POST", "jobs/query", retry=False, json=job).json()["id"]

    def _read_parallel_pages(
        self, job_id: str, fields: list[str], workers: int, on_page: Callable[[BulkPosition], None] | None
    ) -> Generator[pa.RecordBatch, None, int]:
        """Yields the batches of a complete job's parallel result pages (`_parallel_pages`), calling `on_page` after
        each; returns the number of pages read (0: the org offers none)."""
        pages = 0
        for content, after in self._parallel_pages(job_id, workers):
            pages += 1
            if content.strip():
                yield from parse_bulk_page(content, fields)
            if on_page is not None:
                on_page(BulkPosition(job_id, after))
        return pages

    def _read_located_pages(
        self,
        job_id: str,
        fields: list[str],
        page_size: int,
        locator: str | None,
        on_page: Callable[[BulkPosition], None] | None,
    ) -> Generator[pa.RecordBatch, None, int]:
        """Yields the batches of a complete job's result pages from `locator` on (None: the first page), one page
        of `page_size` records at a time, calling `on_page` with the next page's locator after each; returns the
        number of pages read."""
        pages = 0
        while True:
            params: dict[str, Any] = {"maxRecords": page_size}
            if locator:
                params["locator"] = locator
            response = self._request("GET", f"jobs/query/{job_id}/results", params=params)
            pages += 1
            if int(response.headers.get("Sforce-NumberOfRecords", "1")) > 0 and response.content.strip():
                yield from parse_bulk_page(response.content, fields)
            locator = response.headers.get("Sforce-Locator")
            if locator == "null":  # the org's way of saying "no more pages"
                locator = None
            if on_page is not None:
                on_page(BulkPosition(job_id, locator or None))
            if not locator:
                return pages

    def _end_job(self, job_id: str, *, finished: bool, gone: bool, resumable: bool) -> None:
        """A job is deleted when done. A failed read keeps it when the caller holds its positions (`resumable`: it
        has `on_page`): the next run resumes from the last locator it committed; without them no run could, so
        it goes. A job the org no longer has is left alone."""
        if gone:
            log.info("Bulk query job %s is gone from the org (expired or deleted)", job_id)
        elif finished or not resumable:
            self._delete_job(job_id)
        else:
            log.info("Bulk query job %s kept: a later run resumes it from its last committed locator", job_id)

    def _parallel_pages(self, job_id: str, workers: int) -> Iterator[tuple[bytes, str | None]]:
        """The CSV pages of a complete job through its parallel result pages, in order, `workers` (at least 2)
        downloads at a time, each with the locator of the page after it (None after the last); nothing if the org
        does not offer them (404)."""
        try:
            listing = self._request("GET", f"jobs/query/{job_id}/resultPages").json()
        except SalesforceApiError as exc:
            if exc.status == 404:
                log.info("the org offers no parallel result pages (API %s): reading with locators", self.api_version)
                return
            raise
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bulk-page") as pool:
            pending: deque[tuple[Future[requests.Response], str]] = deque()
            while True:
                for page in listing.get("resultPages") or []:
                    url = page.get("resultUrl") or page.get("resultLink")  # the guide names it resultUrl
                    pending.append((pool.submit(self._request, "GET", url), url))
                    while len(pending) > max(workers - 1, 1):  # the next page's URI is known: its locator
                        yield pending.popleft()[0].result().content, _locator_of(pending[0][1])
                if listing.get("done", True) or not listing.get("nextRecordsUrl"):
                    break
                listing = self._request("GET", listing["nextRecordsUrl"]).json()
            while pending:
                future, _ = pending.popleft()
                yield future.result().content, _locator_of(pending[0][1]) if pending else None

    def _wait_for_job(self, job_id: str, poll_seconds: float, timeout_seconds: float) -> None:
        deadline = time.monotonic() + timeout_seconds
        while True:
            info = self._request("GET", f"jobs/query/{job_id}").json()
            state = info["state"]
            if state == "JobComplete":
                return
            if state in ("Failed", "Aborted"):
                raise BulkJobFailed(
                    "GET", f"jobs/query/{job_id}", 200, f"Bulk query job {state}: {info.get('errorMessage', '')}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"Bulk query job {job_id} still {state} after {timeout_seconds:.0f}s")
            time.sleep(poll_seconds)

    def _delete_job(self, job_id: str) -> None:
        try:
            self._request("DELETE", f"jobs/query/{job_id}")
        except (SalesforceApiError, requests.RequestException) as exc:
            log.warning("could not delete Bulk query job %s (it expires on its own): %s", job_id, exc)

    # -- limits -------------------------------------------------------------------------------------
    def api_usage(self) -> dict[str, int]:
        """``{"used": U, "limit": L}`` from the last ``Sforce-Limit-Info`` header (one ``limits`` call if none
        has been seen yet)."""
        if not self._usage:
            self._request("GET", "limits")
        return dict(self._usage)


def _locator_of(url: str) -> str | None:
    """The `locator` parameter of a results URI (None: the first page's, which has none)."""
    locators = parse_qs(urlsplit(url).query).get("locator")
    return locators[0] if locators else None


def soql_datetime(ts: datetime) -> str:
    """A SOQL dateTime literal (UTC, milliseconds): what a WHERE clause compares SystemModstamp with."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def select_soql(
    object_name: str,
    fields: Iterable[str],
    *,
    where: str | None = None,
    order_by: str | None = None,
    limit: int | None = None,
) -> str:
    """``SELECT <fields> FROM <object> [WHERE ..] [ORDER BY ..] [LIMIT n]``. Names come from describe(); values
    belong in ``where``, built with simple-salesforce's ``format_soql`` so they are quoted and escaped there."""
    return (
        format_soql("SELECT {:literal} FROM {:literal}", ", ".join(fields), object_name)
        + (f" WHERE {where}" if where else "")
        + (f" ORDER BY {order_by}" if order_by else "")
        + (format_soql(" LIMIT {}", limit) if limit is not None else "")
    )


def parse_bulk_page(content: bytes, fields: list[str]) -> Iterator[pa.RecordBatch]:
    """One Bulk API 2.0 CSV result page (header line + records) -> Arrow record batches of strings.

    Salesforce writes RFC 4180 CSV: values in double quotes, ``""`` for a quote inside one, and line breaks
    (LF, CRLF or a lone CR) kept as they are inside the quotes of multi-line text (descriptions, email bodies).
    So the parser must let quoted values span lines (``newlines_in_values``): without it pyarrow cuts the page
    into blocks at line breaks and fails once a page passes one block (1 MiB) with a multi-line value in it
    (``Expected 18 columns, got 6``, ``CSV parser got out of sync with chunker``). The page is already in
    memory, so it is parsed as one block: no record, however long, can straddle a block boundary. Record
    terminators may be LF or CRLF (the job's ``lineEnding``); a leading UTF-8 BOM is skipped. Empty cells are
    null (quoted or not): Salesforce stores no empty strings. Values are never trimmed.
    """
    block = min(max(len(content) + 1, 1 << 20), (1 << 31) - 1)
    reader = pa_csv.open_csv(
        pa.BufferReader(content),
        read_options=pa_csv.ReadOptions(block_size=block),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(
            column_types={f: pa.string() for f in fields},
            strings_can_be_null=True,
            null_values=[""],
            quoted_strings_can_be_null=True,
        ),
    )
    for batch in reader:
        if batch.num_rows:
            yield batch


def rest_text_batch(records: list[dict[str, Any]], fields: list[str]) -> pa.RecordBatch:
    """REST JSON records -> one record batch of text columns named like `fields`, the form `bulk_query_all` yields:
    null for a missing or empty value, booleans ``true``/``false``, numbers and datetimes as REST writes them."""

    def text(value: Any) -> str | None:
        if value is None or value == "":
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return pa.record_batch([pa.array([text(r.get(f)) for r in records], pa.string()) for f in fields], names=fields)


def bulk_refusal(exc: SalesforceApiError) -> str | None:
    """``"<errorCode>: <message>"`` when a Bulk API 2.0 job creation was refused for its object (HTTP 400
    ``INVALIDENTITY``: "Entity 'X' is not supported by the Bulk API."), else None."""
    return _refused_with(exc, {BULK_REFUSED_ENTITY})


def refused_id_error(exc: SalesforceApiError) -> str | None:
    """``"<errorCode>: <message>"`` when the org refused a call for an id that is no id (``REFUSED_ID_ERRORS``,
    HTTP 400), else None."""
    return _refused_with(exc, REFUSED_ID_ERRORS)


def _refused_with(exc: SalesforceApiError, codes: Collection[str]) -> str | None:
    """``"<errorCode>: <message>"`` of the first error of an HTTP 400 answer whose ``errorCode`` is one of `codes`
    (Salesforce's error body: a JSON list of ``{"errorCode", "message"}``), else None."""
    if exc.status != 400:
        return None
    try:
        errors = json.loads(exc.body)
    except ValueError:
        return None
    for error in errors if isinstance(errors, list) else []:
        if isinstance(error, dict) and error.get("errorCode") in codes:
            return f"{error['errorCode']}: {error.get('message', '')}"
    return None


def _strip(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "attributes"}


MISSING_CREDENTIALS = (
    "set SF_ACCESS_TOKEN + SF_INSTANCE_URL (a session), or SF_CLIENT_ID + SF_USERNAME + SF_PRIVATE_KEY_FILE (OAuth "
    "JWT bearer), or SF_CLIENT_ID + SF_CLIENT_SECRET + SF_INSTANCE_URL (OAuth client credentials; with SF_USERNAME + "
    "SF_PASSWORD the username-password flow), or SF_USERNAME + SF_PASSWORD + SF_SECURITY_TOKEN (SOAP login)"
)


# Fields holding a URL the credentials are sent to: the OAuth form (client secret, password, signed assertion) and
# then the session token on every call.
URL_FIELDS = ("instance_url", "login_url")


class InsecureUrlError(ValueError):
    """A Salesforce URL that would send the credentials in clear."""


def check_urls(values: dict[str, Any]) -> None:
    """Refuse a URL field (`URL_FIELDS`, resource field name -> value) that is not `https://`, unless its host is
    this machine's loopback (a local emulator or proxy): raises `InsecureUrlError` naming the variable to fix."""
    for name in URL_FIELDS:
        url = values.get(name)
        if not url:
            continue
        parts = urlsplit(str(url))
        if parts.scheme == "https" and parts.hostname:
            continue
        if parts.scheme == "http" and is_loopback(parts.hostname):
            continue
        shown = f"{parts.scheme}://{parts.hostname}" if parts.scheme and parts.hostname else "no URL with a host"
        raise InsecureUrlError(
            f"{ENV_VARS[name]} ({shown}) is not an https URL: the Salesforce credentials and "
            "session token would cross the network in clear. Set it to https://<host> (http:// "
            "is accepted only for a loopback host such as 127.0.0.1)"
        )


def login_flow(values: dict[str, Any]) -> str | None:
    """The login flow that fields (resource field name -> value) choose, or None when none is complete. The order
    is the order of precedence: a token, a signed JWT, a client secret, a SOAP password."""
    has = {name for name, value in values.items() if value}
    if "access_token" in has:
        return "token"
    if {"client_id", "username", "private_key_file"} <= has:
        return "jwt_bearer"
    if {"client_id", "client_secret", "instance_url"} <= has:
        return "password" if {"username", "password"} <= has else "client_credentials"
    if {"username", "password"} <= has:
        return "soap"
    return None


def salesforce_resource_from_env(
    environ: dict[str, str] | None = None, *, resolved: bool = False
) -> SalesforceResource:
    """The resource for this environment: every ``SF_*`` variable that is set is passed as ``dg.EnvVar`` (so
    secrets stay out of config); without credentials, the local emulator's defaults apply. ``resolved`` passes
    the values themselves, for a process that uses the resource outside Dagster (the CDC subscriber)."""
    env = os.environ if environ is None else environ
    kwargs: dict[str, Any] = {
        name: env[var] if resolved else dg.EnvVar(var) for name, var in ENV_VARS.items() if env.get(var)
    }
    has_credentials = any(k in kwargs for k in ("access_token", "username", "client_id"))
    if not has_credentials:
        kwargs["access_token"] = LOCAL_ACCESS_TOKEN
        if "ca_bundle" not in kwargs and os.path.exists(LOCAL_CA_BUNDLE):
            kwargs["ca_bundle"] = os.path.abspath(LOCAL_CA_BUNDLE)
    return SalesforceResource(**kwargs)
