"""What Bulk API 2.0 refuses, against the real HTTPS emulator: a query naming a binary (base64) field, and an object
it does not support. Neither fails a run: binary fields are no columns and are never asked for
(object_schema/describe.py `BINARY_TYPES`), and a refused object is read through REST queryAll
(resources/salesforce.py `bulk_query_all`), its calls counted in the API budget like every other call.
"""

from __future__ import annotations

import base64
import json

import pytest
from poll_harness import assert_equal_to_org, poll_platform, resource, run_replicas

from cdc_assets.names import META_API_CALLS, META_FIELD_CATALOG, META_FIELDS_EXCLUDED, replica_key
from object_schema.describe import BINARY_REASON, ObjectSchema
from replication.field_catalog import BINARY, catalog_name
from resources.delta import read_table
from resources.salesforce import BulkJobFailed, SalesforceApiError


def _blob(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _metadata(result, name: str) -> dict:
    """The metadata of `name`'s one materialization in the run `result`."""
    [materialization] = result.asset_materializations_for_node(replica_key(name).to_python_identifier())
    return {k: v.value for k, v in materialization.metadata.items()}


def test_a_binary_field_bulk_api_refuses_is_no_column_and_the_object_replicates_without_it(tmp_path, org):
    salesforce = resource(org)
    sf = salesforce.client()
    account = sf.Account.create({"Name": "Acme"})["id"]
    ids = [
        sf.Attachment.create({"ParentId": account, "Name": f"note{i}.txt", "Body": _blob(f"file {i}")})["id"]
        for i in range(3)
    ]
    # The org as Salesforce is: REST gives the blob's URL, the blob resource its bytes, and Bulk refuses the field.
    [record] = salesforce.query_all(f"SELECT Id, Body, BodyLength FROM Attachment WHERE Id = '{ids[0]}'")
    assert record["Body"] == f"/services/data/v{salesforce.api_version}/sobjects/Attachment/{ids[0]}/Body"
    assert salesforce._request("GET", record["Body"]).content == b"file 0"
    assert record["BodyLength"] == len(b"file 0")
    with pytest.raises(BulkJobFailed, match="Binary field not supported"):
        list(salesforce.bulk_query_all("Attachment", ["Id", "Body"]))

    platform = poll_platform(tmp_path, org, objects=["Attachment"])
    result = run_replicas(platform, ["Attachment"])  # the initial load (Bulk), then a poll and an Id comparison
    sf.Attachment.update(ids[1], {"Name": "renamed.txt", "Body": _blob("new contents")})
    sf.Attachment.delete(ids[2])
    later = run_replicas(platform, ["Attachment"])

    columns = {f.name for f in platform.delta_table("Attachment").schema().fields}
    assert "Body" not in columns and {"Name", "BodyLength", "ParentId"} <= columns
    assert_equal_to_org(platform, org, ["Attachment"])
    rows = platform.rows("Attachment")
    assert rows[ids[1]]["Name"] == "renamed.txt" and rows[ids[1]]["BodyLength"] == len(b"new contents")
    assert rows[ids[2]]["_sf_deleted"] is True
    for run in (result, later):
        assert _metadata(run, "Attachment")[META_FIELDS_EXCLUDED] == {"Body": BINARY_REASON}
    catalog = read_table(platform.delta_table(catalog_name("Attachment"))).to_pylist()
    [body] = [r for r in catalog if r["name"] == "Body"]
    assert (body["type"], body["replicated"], body["status"]) == ("base64", False, BINARY)
    assert _metadata(later, "Attachment")[META_FIELD_CATALOG].rstrip("/").endswith(catalog_name("Attachment"))


def test_an_object_bulk_api_refuses_is_read_through_rest_queryall_and_counted_in_the_api_budget(tmp_path, org):
    salesforce = resource(org)
    sf = salesforce.client()
    statuses = [
        sf.CaseStatus.create({"MasterLabel": label, "ApiName": label, "SortOrder": n, "IsClosed": label == "Closed"})[
            "id"
        ]
        for n, label in enumerate(["New", "Working", "Escalated", "Closed"])
    ]
    # The org as Salesforce is: a Bulk query job of the object is refused at creation.
    with pytest.raises(SalesforceApiError) as refused:
        salesforce._request(
            "POST", "jobs/query", retry=False, json={"operation": "queryAll", "query": "SELECT Id FROM CaseStatus"}
        )
    assert refused.value.status == 400
    assert json.loads(refused.value.body) == [
        {"errorCode": "INVALIDENTITY", "message": "Entity 'CaseStatus' is not supported by the Bulk API."}
    ]

    platform = poll_platform(tmp_path, org, objects=["CaseStatus"])
    org.reset_request_counts()
    first = run_replicas(platform, ["CaseStatus"])  # the initial load: a Bulk read, refused, then REST
    assert_equal_to_org(platform, org, ["CaseStatus"])
    counts = org.request_counts()
    assert (counts.get("bulk_query_job"), counts.get("bulk_results", 0), counts.get("query")) == (1, 0, 1)
    assert _metadata(first, "CaseStatus")[META_API_CALLS] >= counts["query"] + counts["bulk_query_job"]

    sf.CaseStatus.update(statuses[1], {"MasterLabel": "In Progress", "SortOrder": 9})
    org.reset_request_counts()
    later = run_replicas(platform, ["CaseStatus"])  # a poll (REST), then the Id comparison: a Bulk read, refused
    counts = org.request_counts()
    assert (counts.get("bulk_query_job"), counts.get("bulk_results", 0), counts.get("query")) == (1, 0, 2)
    assert _metadata(later, "CaseStatus")[META_API_CALLS] >= counts["query"] + counts["bulk_query_job"]
    assert_equal_to_org(platform, org, ["CaseStatus"])
    assert platform.rows("CaseStatus")[statuses[1]]["MasterLabel"] == "In Progress"

    sf.CaseStatus.delete(statuses[2])  # no recycle bin: gone at once; the Id comparison (through REST) finds it
    run_replicas(platform, ["CaseStatus"], confirm_deletes=True)  # a quarter of the records gone: confirmed
    rows = platform.rows("CaseStatus")
    assert rows[statuses[2]]["_sf_deleted"] is True
    assert {r["Id"] for r in rows.values() if not r["_sf_deleted"]} == set(statuses) - {statuses[2]}


def test_replication_yaml_cannot_select_or_hash_a_binary_field_and_may_exclude_it(org):
    describe = org.store.describe("Attachment")
    for option in ({"include": ["Name", "Body"]}, {"hashed": ["Body"]}):
        with pytest.raises(ValueError, match="Body: binary \\(base64\\) fields are never replicated"):
            ObjectSchema.from_describe(describe, **option)
    excluded = ObjectSchema.from_describe(describe, exclude=["Body", "Description"])
    assert "Body" not in excluded.column_names and "Description" not in excluded.column_names
    assert excluded.binary == ("Body",) and excluded.knows("Body")  # an event naming it asks no describe()
