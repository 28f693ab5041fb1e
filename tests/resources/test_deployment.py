"""Which org, Spark, warehouse and landing zone a run uses is the deployment's: a run config naming one of those
fields is refused by Dagster before the run starts, naming the field; the fields a run may tune still apply, and a
field given as `dg.EnvVar` reads the variable in the run's process."""

from __future__ import annotations

import dagster as dg
import pytest
from harness import Platform
from settings import TEST_SPARK_CONF

from resources.salesforce import SalesforceResource

OBJECTS = ["Account"]
A1 = "001000000000001AAA"


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(tmp_path, sample_dir / "describe", OBJECTS, TEST_SPARK_CONF)


def _materialize(platform: Platform, resources: dict) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        platform.executable_assets(),
        selection=["change_events"],
        resources=platform.defs.resources,
        instance=platform.instance,
        run_config={"resources": resources},
    )


@pytest.mark.parametrize(
    ("resource", "field", "value"),
    [
        ("salesforce", "instance_url", "https://attacker.example.com"),
        ("salesforce", "access_token", "a-token-of-another-org"),
        ("pyspark", "spark_config", {"spark.remote": "sc://attacker.example.com:15002"}),
        ("warehouse", "storage_options", {"AWS_ENDPOINT_URL": "https://attacker.example.com"}),
        ("warehouse", "root", "s3://another-bucket/warehouse"),
        ("landing", "path", "/tmp/another-landing-zone"),
    ],
)
def test_a_run_config_naming_a_deployment_field_is_refused(platform, resource, field, value):
    with pytest.raises(
        dg.DagsterInvalidConfigError,
        match=rf'unexpected config entry "{field}" at path root:resources:{resource}:config',
    ):
        _materialize(platform, {resource: {"config": {field: value}}})
    assert platform.delta_table("change_events") is None  # refused before any step ran


def test_a_run_config_may_tune_the_other_fields(platform):
    platform.land(['{"not": "a change event"}'])
    result = _materialize(
        platform,
        {"salesforce": {"config": {"timeout_seconds": 5.0}}, "warehouse": {"config": {"merge_row_group_rows": 512}}},
    )
    assert result.success
    assert len(platform.quarantine()) == 1  # the run read the deployment's landing zone into its warehouse


def test_a_deployment_field_from_the_environment_is_read_in_the_run(monkeypatch):
    monkeypatch.setenv("SF_TEST_INSTANCE_URL", "https://deployment.example.com")

    @dg.asset
    def org_url(salesforce: SalesforceResource) -> str:
        return str(salesforce.instance_url)

    resource = SalesforceResource(instance_url=dg.EnvVar("SF_TEST_INSTANCE_URL"), access_token="t")
    result = dg.materialize([org_url], resources={"salesforce": resource})
    assert result.output_for_node("org_url") == "https://deployment.example.com"
