"""The replication as a Dagster Component: a `dg` project that names the objects in a `defs.yaml` gets the platform's
definitions through Dagster's own loader (`load_from_defs_folder`, what `dg dev` runs), and they replicate."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from cdc_assets.names import changefeed_key, events_key, ingest_keys, replica_key
from resources.delta import DeltaWarehouse
from salesforce_emulator.landing_lines import event

ACC = "001000000000001AAA"


def dg_project(root: Path, attributes: dict) -> Path:
    """A minimal `dg` project (as `create-dagster project` lays it out) whose defs folder holds one component."""
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "cdc-project"\nversion = "0.1"\n\n[tool.dg]\n'
        'directory_type = "project"\n\n[tool.dg.project]\nroot_module = '
        '"cdc_project"\n'
    )
    folder = root / "src" / "cdc_project" / "defs" / "salesforce"
    folder.mkdir(parents=True)
    for package in (root / "src" / "cdc_project", root / "src" / "cdc_project" / "defs"):
        (package / "__init__.py").write_text("")
    (folder / "defs.yaml").write_text(
        yaml.safe_dump({"type": "definitions.ReplicationComponent", "attributes": attributes})
    )
    return root


@pytest.fixture
def project_defs(tmp_path, sample_dir, monkeypatch):
    describe = sample_dir / "describe"
    root = dg_project(
        tmp_path / "project",
        {
            "objects": ["Account", {"name": "Contact", "freshness": "10m"}],
            "options": {
                "initial_load": False,
                "transaction_close_after": 0,
                "freshness": "5m",
                "changefeed": {"uri": "feeds"},
            },
            "landing_zone": str(tmp_path / "landing"),
            "warehouse": str(tmp_path / "warehouse"),
        },
    )
    # describe() from the sample files, as `describe:` entries would give it
    config = yaml.safe_load((root / "src/cdc_project/defs/salesforce/defs.yaml").read_text())
    config["attributes"]["objects"] = [
        {"name": "Account", "describe": str(describe / "Account.json")},
        {"name": "Contact", "freshness": "10m", "describe": str(describe / "Contact.json")},
    ]
    (root / "src/cdc_project/defs/salesforce/defs.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.syspath_prepend(str(root / "src"))
    yield dg.load_from_defs_folder(path_within_project=root), tmp_path, root
    for name in [m for m in sys.modules if m.startswith("cdc_project")]:
        del sys.modules[name]


def test_a_defs_yaml_naming_the_objects_loads_the_platform(project_defs):
    defs, _, root = project_defs
    graph = defs.resolve_asset_graph()
    keys = graph.get_all_asset_keys()
    assert {replica_key("Account"), replica_key("Contact"), events_key("Contact"), changefeed_key("Account")} <= keys
    assert graph.get(replica_key("Contact")).freshness_policy.fail_window.to_timedelta().total_seconds() == 600
    assert graph.get(replica_key("Account")).freshness_policy.fail_window.to_timedelta().total_seconds() == 300
    feed = root / "src/cdc_project/defs/salesforce/feeds"  # relative paths: against the defs.yaml's folder
    assert str(feed) in graph.get(changefeed_key("Account")).description
    assert {s.name for s in defs.sensors} >= {"landing_zone_sensor", "default_automation_condition_sensor"}


def test_a_defs_yaml_built_platform_materializes_a_replica(project_defs, spark):
    defs, tmp_path, _ = project_defs
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "events-1.jsonl").write_text(event("Account", "CREATE", [ACC], 1, tx="a", Name="Acme") + "\n")
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    result = dg.materialize(
        assets,
        resources=defs.resources,
        selection=[*ingest_keys(["Account", "Contact"]), replica_key("Account")],
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    warehouse = DeltaWarehouse(root=str(tmp_path / "warehouse"))
    rows = warehouse.read(warehouse.table("Account")).to_pylist()
    assert [(r["Id"], r["Name"]) for r in rows] == [(ACC, "Acme")]


def test_a_defs_yaml_may_name_a_replication_yaml_instead(tmp_path, sample_dir):
    (tmp_path / "replication.yaml").write_text(
        yaml.safe_dump(
            {
                "options": {"initial_load": False},
                "objects": [{"name": "Account", "describe": str(sample_dir / "describe" / "Account.json")}],
            }
        )
    )
    from definitions import ReplicationComponent

    loaded = ReplicationComponent(config_path="replication.yaml").loaded(tmp_path)
    assert loaded.config.names == ["Account"] and loaded.path == tmp_path / "replication.yaml"
    with pytest.raises(dg.DagsterInvalidDefinitionError, match="not both"):
        ReplicationComponent(config_path="replication.yaml", objects=["Account"]).loaded(tmp_path)
