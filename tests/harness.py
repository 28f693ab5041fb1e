"""A small driver for the real platform in tests: land files, run Dagster's real `materialize()`, read tables."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import yaml
from deltalake import DeltaTable

from cdc_assets.names import changefeed_key, replica_key
from definitions import build_defs
from resources.delta import CHANGE_EVENTS, QUARANTINE, DeltaWarehouse, read_table
from resources.storage import Folder, is_uri
from sensors.reconciliation import SENSOR_NAME as RECONCILIATION_SENSOR


def write_config(
    path: Path,
    describe_dir: Path | None,
    objects: list[str],
    close_after: float = 60.0,
    initial_load: bool = False,
    per_object: dict[str, dict] | None = None,
    **options,
) -> Path:
    """A replication.yaml; without `describe_dir`, describe() comes from the org; `per_object`: options of one
    object (its entry under `objects`)."""
    path.write_text(
        yaml.safe_dump(
            {
                "options": {"transaction_close_after": close_after, "initial_load": initial_load, **options},
                "objects": [
                    {
                        "name": o,
                        **({"describe": str(describe_dir / f"{o}.json")} if describe_dir else {}),
                        **(per_object or {}).get(o, {}),
                    }
                    for o in objects
                ],
            }
        )
    )
    return path


class Platform:
    """One landing zone + warehouse in a temp dir, driven through Dagster's real materialize().

    `landing_uri` / `warehouse_uri` put them on an object store instead (s3://...; the AWS_* variables reach it):
    `land`, `rows`, `table` and `table_version` then go there, while `root` still holds replication.yaml."""

    def __init__(
        self,
        root: Path,
        describe_dir: Path | None,
        objects: list[str],
        spark_conf: dict[str, str],
        *,
        salesforce=None,
        initial_load: bool = False,
        landing_uri: str | None = None,
        warehouse_uri: str | None = None,
        **options,
    ):
        self.root = root
        self.landing = root / "landing"
        self.warehouse = root / "warehouse"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.landing_uri = landing_uri or str(self.landing)
        self.warehouse_uri = warehouse_uri or str(self.warehouse)
        self.objects = objects
        self.config = write_config(
            root / "replication.yaml", describe_dir, objects, initial_load=initial_load, **options
        )
        self.spark_conf, self.salesforce = spark_conf, salesforce
        self.defs = build_defs(
            config_path=self.config,
            landing_path=self.landing_uri,
            warehouse_root=self.warehouse_uri,
            spark_conf=spark_conf,
            salesforce=salesforce,
        )
        self.instance = dg.DagsterInstance.ephemeral()
        self.counter = 0

    def land(self, lines: list[str], name: str | None = None) -> Path:
        """Make a file visible atomically, as a subscriber does (write under `_`, then rename)."""
        self.counter += 1
        name = name or f"{self.counter:05d}.jsonl"
        text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
        if is_uri(self.landing_uri):  # one upload: visible whole, once complete
            Folder(self.landing_uri).write_atomically(name, text)
            return Path(name)
        target = self.landing / name
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f"_{target.name}"
        tmp.write_text(text)
        os.replace(tmp, target)
        return target

    def executable_assets(self) -> list[dg.AssetsDefinition]:
        return [a for a in self.defs.assets if isinstance(a, dg.AssetsDefinition)]

    def run(
        self, *, close_after: float | None = None, raise_on_error: bool = True, checks: bool = False
    ) -> dg.ExecuteInProcessResult:
        """One run of every asset; with `checks`, the replica asset checks run in it too (a failed blocking check
        fails the run, as in production)."""
        ops = {}
        if close_after is not None:
            ops = {
                replica_key(o).to_python_identifier(): {"config": {"transaction_close_after": close_after}}
                for o in self.objects
            }
        extra = list(self.defs.asset_checks or []) if checks else []
        return dg.materialize(
            self.executable_assets() + extra,
            resources=self.defs.resources,
            instance=self.instance,
            run_config={"ops": ops},
            raise_on_error=raise_on_error,
        )

    @staticmethod
    def check_results(result: dg.ExecuteInProcessResult, name: str) -> dict[str, dg.AssetCheckEvaluation]:
        """The check evaluations of replica `name` in `result`, by check name."""
        return {e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key == replica_key(name)}

    def replication_close_after(self, seconds: float) -> None:
        """Rebuild the definitions with another transaction_close_after (sensors read it from the config)."""
        self.set_options(transaction_close_after=seconds)

    def set_options(self, **options) -> None:
        """Rebuild the definitions with other replication.yaml options."""
        config = yaml.safe_load(self.config.read_text())
        config["options"].update(options)
        self.config.write_text(yaml.safe_dump(config))
        self.defs = build_defs(
            config_path=self.config,
            landing_path=self.landing_uri,
            warehouse_root=self.warehouse_uri,
            spark_conf=self.spark_conf,
            salesforce=self.salesforce,
        )

    def execute(self, request: dg.RunRequest, *, checks: bool = False) -> dg.ExecuteInProcessResult:
        """Run what a sensor requested, as the daemon would (same assets, run config and tags); with `checks`, the
        checks of the selected replicas run in it too, as in the daemon's runs (a failed blocking check fails it)."""
        assets = [a for a in self.executable_assets() if set(a.keys) & set(request.asset_selection)]
        if checks:
            assets += [
                c
                for c in self.defs.asset_checks or []
                if any(k.asset_key in request.asset_selection for k in c.check_keys)
            ]
        return dg.materialize(
            assets,
            resources=self.defs.resources,
            instance=self.instance,
            run_config=request.run_config,
            tags=request.tags,
            selection=request.asset_selection,
            raise_on_error=False,
        )

    def sensor_requests(
        self, sensor_name: str = RECONCILIATION_SENSOR, cursor: str | None = None
    ) -> list[dg.RunRequest]:
        """Evaluate a sensor (the reconciliation sensor by default) against this platform's instance, from `cursor`."""
        context = dg.build_sensor_context(
            instance=self.instance, resources=self.defs.resources, definitions=self.defs, cursor=cursor
        )
        return self.defs.get_sensor_def(sensor_name)(context).run_requests or []

    def automation_requests(self) -> list[dg.RunRequest]:
        """Evaluate the assets' automation conditions as the daemon's automation sensor does (the changefeeds follow
        their replicas: sensors/changefeed.py); one request for the feeds they ask for, or none."""
        result = dg.evaluate_automation_conditions(
            defs=self.defs, instance=self.instance, cursor=getattr(self, "automation_cursor", None)
        )
        self.automation_cursor = result.cursor
        feeds = [changefeed_key(n) for n in self.objects]
        requested = sorted(k for k in feeds if result.get_requested_partitions(k))
        return [dg.RunRequest(asset_selection=requested)] if requested else []

    def run_sensor(self, sensor_name: str = RECONCILIATION_SENSOR, cursor: str | None = None) -> list[dg.RunRequest]:
        """Evaluate a sensor, then run each request it makes as the daemon would; every run must succeed."""
        requests = self.sensor_requests(sensor_name, cursor)
        for request in requests:
            assert self.execute(request).success, f"the run {sensor_name} requested ({request.tags}) failed"
        return requests

    def materialization_of(self, name: str) -> dict:
        """Metadata of the latest materialization of a replica in this platform's instance."""
        event = self.instance.get_latest_materialization_event(replica_key(name))
        return {k: v.value for k, v in event.asset_materialization.metadata.items()}

    def delta_table(self, name: str) -> DeltaTable | None:
        """The table's latest snapshot (None: not created yet), wherever the warehouse is."""
        return DeltaWarehouse(root=self.warehouse_uri).table(name)

    def rows(self, name: str) -> dict[str, dict]:
        return {r["Id"]: r for r in self.table(name)}

    def table(self, name: str) -> list[dict]:
        table = self.delta_table(name)
        return read_table(table).to_pylist() if table is not None else []

    def table_version(self, name: str) -> int | None:
        table = self.delta_table(name)
        return table.version() if table is not None else None

    def change_events(self) -> list[dict]:
        return self.table(CHANGE_EVENTS)

    def quarantine(self) -> list[dict]:
        return self.table(QUARANTINE)

    def materialization(self, result: dg.ExecuteInProcessResult, name: str) -> dict:
        key = replica_key(name) if name != "change_events" else dg.AssetKey("change_events")
        # The change_events step also materializes one slice per object (events/<Object>_events): only its own key.
        mats = [m for m in result.asset_materializations_for_node(key.to_python_identifier()) if m.asset_key == key]
        return {k: v.value for k, v in mats[-1].metadata.items()}


def replica_rows(warehouse: Path, name: str) -> dict[str, dict]:
    """A replica's rows by Id ({} when it has no table yet)."""
    path = warehouse / name
    if not (path / "_delta_log").exists():
        return {}
    return {r["Id"]: r for r in read_table(DeltaTable(str(path))).to_pylist()}


def load_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def comparable(rows: dict[str, dict], columns: list[str] | None = None) -> dict[str, dict]:
    """Rows without the write-time column, JSON-normalised for equality checks."""
    out = {}
    for rid, row in rows.items():
        out[rid] = {k: v for k, v in row.items() if k != "_sf_synced_at" and (columns is None or k in columns)}
    return json.loads(json.dumps(out, default=str, sort_keys=True))
