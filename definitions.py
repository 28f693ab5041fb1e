"""The platform's Dagster definitions: `build_defs` assembles them, `defs` is them as configured by the environment,
and `ReplicationComponent` is them as a Dagster Component, for a `dg` project that adds them with a `defs.yaml`.

CDC_CONFIG (replication.yaml, read once when the location loads: its runs use that text), CDC_LANDING_ZONE,
CDC_WAREHOUSE, CDC_SENSORS_RUNNING (1 = sensors start on); see README. This module is the only place that puts assets (`cdc_assets/`), sensors (`sensors/`) and resources
(`resources/`) together: sensors import what the assets write, never the other way round, so the folders form no
cycle. Tests, the demo and the benchmarks call `build_defs` with their own config, landing zone and warehouse.

`defs` is a `@dg.definitions` function, Dagster's lazy entry point: importing this module (a run worker, a test, a
`dg` project importing the component type) reads no replication.yaml; the code location calls it when it loads.

**As a Component** (README "Dagster conventions"): a `dg` project's `defs/<folder>/defs.yaml`

```yaml
type: definitions.ReplicationComponent
attributes:
  objects: [Account, {name: Contact, freshness: 10m}]     # the entries of replication.yaml's `objects`
  options: {transaction_close_after: 10, freshness: 5m}   # its `options`
  landing_zone: /data/landing                             # default CDC_LANDING_ZONE; warehouse: CDC_WAREHOUSE
```
or `config_path: replication.yaml` (relative to the folder) instead of `objects` and `options`. Either is validated
like replication.yaml (replication/config.py), its relative paths resolved against the folder of the defs.yaml.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from cdc_assets.assets import build_change_events_asset, build_replica_asset, landing_zone
from cdc_assets.changefeed.export import build_changefeed_assets
from cdc_assets.checks import build_change_events_checks, build_replica_checks
from cdc_assets.history.assets import history_specs
from cdc_assets.history.checks import build_history_checks
from cdc_assets.landing_checks import build_landing_check, build_subscriber_check
from cdc_assets.operate.erase import build_erase_job
from cdc_assets.operate.jobs import build_operator_jobs
from cdc_assets.upkeep.jobs import build_upkeep
from replication.config import LoadedConfig, load_location_config, parse_config, read_config
from resources.commit_safety import refuse_unsafe_settings
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.salesforce import SalesforceResource, salesforce_resource_from_env
from resources.spark import spark_resource
from resources.storage import close_folder, keep_private
from sensors.changefeed import build_automation_sensor
from sensors.config import build_config_sensor
from sensors.describe import build_describe_sensors
from sensors.formulas import build_formula_sensors
from sensors.landing_zone import build_landing_zone_sensor
from sensors.poll import build_poll_sensors
from sensors.reconciliation import build_reconciliation_sensor
from sensors.replica_status import build_status_sensor
from sensors.run_liveness import build_run_liveness_sensor
from sensors.subscriber_status import build_subscriber_status_sensor


def build_defs(
    *,
    config_path: str | Path | None = None,
    landing_path: str | None = None,
    warehouse_root: str | None = None,
    spark_conf: dict[str, str] | None = None,
    sensors_running: bool = False,
    salesforce: SalesforceResource | None = None,
    loaded: LoadedConfig | None = None,
) -> dg.Definitions:
    """Every asset, check, sensor and resource for the objects in `config_path` (default: CDC_CONFIG), or in
    `loaded`, the configuration a code location loaded (`defs` below: its runs use that text, not the file)."""
    loaded = loaded or read_config(config_path)
    replication = loaded.config
    assets: list[dg.AssetsDefinition | dg.AssetSpec] = [
        landing_zone,
        build_change_events_asset(replication=replication),
        *[build_replica_asset(sobject=o, replication=replication) for o in replication.objects],
        *build_changefeed_assets(replication=replication),
        *history_specs(replication=replication),  # written by the replica steps (replication/history/)
    ]
    status = dg.DefaultSensorStatus.RUNNING if sensors_running else dg.DefaultSensorStatus.STOPPED
    warehouse = DeltaWarehouse(root=warehouse_root or os.environ.get("CDC_WAREHOUSE", "warehouse"))
    refuse_unsafe_settings(warehouse.root, dict(warehouse.storage_options))  # no location that could lose data
    upkeep_jobs, upkeep_schedules = build_upkeep(  # table upkeep (replication/upkeep/): the replicas, change_events
        replication=replication, default_status=dg.DefaultScheduleStatus(status.value)
    )
    return dg.Definitions(
        jobs=[
            *upkeep_jobs,
            *build_operator_jobs(replication=replication),  # + what a person runs from the UI
            build_erase_job(replication=replication),
        ],
        schedules=upkeep_schedules,
        assets=assets,
        # One process per run: every step shares one Spark session instead of starting a JVM per step.
        executor=dg.in_process_executor,
        asset_checks=[
            *[build_replica_checks(sobject=o, replication=replication) for o in replication.objects],
            build_change_events_checks(),
            build_subscriber_check(replication=replication),
            build_landing_check(),
            *build_history_checks(objects=list(replication.objects)),
        ],
        sensors=[
            build_landing_zone_sensor(replication=replication, default_status=status),
            build_reconciliation_sensor(replication=replication, default_status=status),
            build_subscriber_status_sensor(replication=replication, default_status=status),
            *build_poll_sensors(replication=replication, default_status=status),
            *build_formula_sensors(replication=replication, default_status=status),
            *build_describe_sensors(replication=replication, default_status=status),
            *build_automation_sensor(replication=replication, default_status=status),
            build_run_liveness_sensor(default_status=status),
            build_config_sensor(loaded=loaded, default_status=status),
            build_status_sensor(replication=replication, default_status=status),
        ],
        resources={
            "pyspark": spark_resource(spark_conf),
            "warehouse": warehouse,
            "landing": LandingZone(
                path=landing_path or os.environ.get("CDC_LANDING_ZONE", "landing"),
                max_line_bytes=replication.options.max_line_bytes,
            ),
            "salesforce": salesforce or salesforce_resource_from_env(),
        },
    )


class ReplicationComponent(dg.Component, dg.Model, dg.Resolvable):
    """Salesforce objects replicated from Change Data Capture into Delta Lake: the whole platform (replica assets,
    checks, changefeeds, sensors, upkeep and operator jobs) for the objects named here."""

    objects: list[str | dict[str, Any]] = []  # noqa: RUF012 (a pydantic model copies defaults) entries of replication.yaml's `objects`
    options: dict[str, Any] = {}  # noqa: RUF012 (a pydantic model copies defaults) replication.yaml's `options`
    config_path: str | None = None  # a replication.yaml instead (relative to this folder)
    landing_zone: str | None = None  # default: CDC_LANDING_ZONE
    warehouse: str | None = None  # default: CDC_WAREHOUSE
    sensors_running: bool = False  # sensors and schedules start running

    def loaded(self, folder: Path) -> LoadedConfig:
        if self.config_path:
            if self.objects or self.options:
                raise dg.DagsterInvalidDefinitionError(
                    f"{folder}/defs.yaml: give `config_path` or `objects`/`options`, not both"
                )
            return read_config(folder / self.config_path)
        path = folder / "defs.yaml"
        text = yaml.safe_dump({"options": self.options, "objects": self.objects}, sort_keys=False)
        return LoadedConfig(path, text, parse_config(text, path))

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        keep_private()  # as `defs` below: this process and every run it starts write the org's rows
        close_folder(os.environ.get("DAGSTER_HOME"))
        return build_defs(
            loaded=self.loaded(Path(context.path)),
            landing_path=self.landing_zone,
            warehouse_root=self.warehouse,
            sensors_running=self.sensors_running,
        )


@dg.definitions
def defs() -> dg.Definitions:
    """A code location: replication.yaml as it loaded, for its sensors and every run it starts
    (load_location_config).

    The code location and every run it starts (Dagster's CLI loads this function in each) create their files
    private to their user whatever the umask they were started with: Delta tables, changefeeds, staged Parquet, run
    logs, and the instance's folder (docs/operations/security.md, File modes)."""
    keep_private()
    close_folder(os.environ.get("DAGSTER_HOME"))
    return build_defs(loaded=load_location_config(), sensors_running=os.environ.get("CDC_SENSORS_RUNNING") == "1")
