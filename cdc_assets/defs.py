"""Assemble the platform's Definitions from a replication config and where things live."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg

from cdc_assets.assets import build_change_events_asset, build_replica_asset, landing_zone
from cdc_assets.config import ReplicationConfig, load_config
from resources.delta import DeltaWarehouse
from resources.landing_zone import LandingZone
from resources.spark import spark_resource
from sensors.landing_zone import build_landing_zone_sensor
from spark_ops.schema import ObjectSchema


def object_schemas(replication: ReplicationConfig) -> dict[str, ObjectSchema]:
    schemas = {}
    for sobject in replication.objects:
        schema = sobject.schema_from_file()
        if schema is None:
            raise ValueError(f"replication.yaml: object {sobject.name} names no describe file")
        schemas[sobject.name] = schema
    return schemas


def build_defs(*, config_path: str | Path | None = None, landing_path: str | None = None,
               warehouse_root: str | None = None, spark_conf: dict[str, str] | None = None,
               sensors_running: bool = False) -> dg.Definitions:
    replication = load_config(config_path)
    schemas = object_schemas(replication)
    assets = [
        landing_zone,
        build_change_events_asset(config=replication, schemas=schemas),
        *[build_replica_asset(sobject=o, schema=schemas[o.name], replication=replication)
          for o in replication.objects],
    ]
    status = dg.DefaultSensorStatus.RUNNING if sensors_running else dg.DefaultSensorStatus.STOPPED
    return dg.Definitions(
        assets=assets,
        sensors=[build_landing_zone_sensor(replication=replication, default_status=status)],
        resources={
            "pyspark": spark_resource(spark_conf),
            "warehouse": DeltaWarehouse(root=warehouse_root or os.environ.get("CDC_WAREHOUSE", "warehouse")),
            "landing": LandingZone(path=landing_path or os.environ.get("CDC_LANDING_ZONE", "landing")),
        },
    )
