"""The Dagster conventions the platform follows (README "Dagster conventions"), through Dagster's real machinery:
the stale-status resolver the UI asks for "Unsynced", the automation condition evaluation the daemon runs,
`materialize()` with real blocking checks, and the run tags the sensors put on their requests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView, TemporalContext
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.storage.tags import PRIORITY_TAG
from dagster._time import get_current_datetime
from deltalake import DeltaTable, write_deltalake
from harness import Platform
from settings import TEST_SPARK_CONF

from cdc_assets.checks import UNIQUE_ID
from cdc_assets.names import VISIBLE, changefeed_key, events_key, object_tag, replica_key
from replication.config import ConfigError, parse_config
from resources.delta import read_table
from salesforce_emulator.landing_lines import event
from sensors.landing_zone import SENSOR_NAME as LANDING

OBJECTS = ["Account", "Contact"]
ACC, ACC2, CON = "001000000000001AAA", "001000000000002AAA", "003000000000001AAA"


@pytest.fixture
def platform(tmp_path, spark, sample_dir):
    return Platform(
        tmp_path,
        sample_dir / "describe",
        OBJECTS,
        TEST_SPARK_CONF,
        close_after=0,
        changefeed={"uri": str(tmp_path / "feed")},
    )


def landing_run(
    platform: Platform, lines: list[str], *, checks: bool = True
) -> tuple[dg.RunRequest, dg.ExecuteInProcessResult]:
    platform.land(lines)
    context = dg.build_sensor_context(
        instance=platform.instance, definitions=platform.defs, resources=platform.defs.resources
    )
    [request] = platform.defs.get_sensor_def(LANDING)(context).run_requests
    return request, platform.execute(request, checks=checks)


def stale_status(platform: Platform, key: dg.AssetKey) -> tuple[StaleStatus, list[str]]:
    """What the UI shows as "Unsynced" (the webserver asks this resolver), with its causes."""
    graph = platform.defs.resolve_asset_graph()
    view = AssetGraphView(
        temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
        instance=platform.instance,
        asset_graph=graph,
    )
    resolver = CachingStaleStatusResolver(platform.instance, graph, view)
    return resolver.get_status(key), [c.reason for c in resolver.get_stale_root_causes(key)]


def automation_requests(platform: Platform, cursor=None, at: datetime | None = None) -> tuple[set[dg.AssetKey], object]:
    """One evaluation of the automation conditions, as default_automation_condition_sensor runs it (at `at`): the
    assets it requests, and the cursor for the next one."""
    result = dg.evaluate_automation_conditions(
        defs=platform.defs, instance=platform.instance, cursor=cursor, evaluation_time=at
    )
    keys = {changefeed_key(n) for n in OBJECTS}
    return {k for k in keys if result.get_requested_partitions(k)}, result.cursor


def test_a_replica_stays_in_sync_through_landing_runs_that_carry_only_other_objects_events(platform):
    landing_run(
        platform,
        [
            event("Account", "CREATE", [ACC], 1, tx="a", Name="Acme"),
            event("Contact", "CREATE", [CON], 2, tx="c", LastName="Lovelace"),
        ],
        checks=False,
    )
    # The next landing run still includes Contact (it may hold rows of the newest transaction, tx c); the one
    # after it carries Account's events alone.
    for seq, tx in ((3, "b"), (4, "e")):
        request, result = landing_run(
            platform, [event("Account", "UPDATE", [ACC], seq, tx=tx, Name=f"Acme {seq}")], checks=False
        )
    assert result.success and replica_key("Contact") not in request.asset_selection
    assert stale_status(platform, replica_key("Contact")) == (StaleStatus.FRESH, [])  # nothing of its own came
    assert stale_status(platform, events_key("Contact")) == (StaleStatus.FRESH, [])  # its slice neither
    assert stale_status(platform, replica_key("Account"))[0] == StaleStatus.FRESH

    platform.land([event("Contact", "UPDATE", [CON], 5, tx="d", LastName="King")])
    ingest_only = platform.execute(
        dg.RunRequest(asset_selection=[dg.AssetKey("change_events"), events_key("Account"), events_key("Contact")])
    )
    assert ingest_only.success
    status, causes = stale_status(platform, replica_key("Contact"))  # its events wait: unsynced, and says why
    assert status == StaleStatus.STALE and causes == ["has a new data version"], causes
    assert stale_status(platform, replica_key("Account"))[0] == StaleStatus.FRESH


def test_the_changefeed_follows_its_replica_only_after_its_blocking_checks_pass(platform, monkeypatch):
    requested, cursor = automation_requests(platform)  # the sensor's first evaluation: nothing to export yet
    assert requested == set()
    _, first = landing_run(platform, [event("Account", "CREATE", [ACC], 1, tx="a", Name="Acme")])
    assert first.success
    requested, cursor = automation_requests(platform, cursor)
    assert requested == {changefeed_key("Account")}  # Contact has no replica yet
    assert platform.execute(dg.RunRequest(asset_selection=sorted(requested))).success
    requested, cursor = automation_requests(platform, cursor)
    assert requested == set()  # handled

    # A writer bypassing the merge appends a second row for the same Id: unique_id (blocking) fails.
    table_path = str(platform.warehouse / "Account")
    good_version = DeltaTable(table_path).version()
    write_deltalake(table_path, read_table(DeltaTable(table_path)), mode="append")
    # (the next change is to another record: a merge matching the duplicated one would itself refuse)
    _, bad = landing_run(platform, [event("Account", "CREATE", [ACC2], 2, tx="b", Name="Initech")])
    assert not bad.success
    assert platform.check_results(bad, "Account")[UNIQUE_ID].passed is False
    assert replica_key("Account") in {m.asset_key for m in bad.get_asset_materialization_events()}
    requested, cursor = automation_requests(platform, cursor)
    assert requested == set(), "a replica whose blocking check failed must not be exported"

    # In one run with the replica, Dagster skips the feed once the blocking check fails.
    together = (
        platform.defs.get_assets_def(replica_key("Account")),
        platform.defs.get_assets_def(changefeed_key("Account")),
    )
    checks = [c for c in platform.defs.asset_checks if replica_key("Account") in {k.asset_key for k in c.check_keys}]
    run = dg.materialize(
        [*together, *checks], resources=platform.defs.resources, instance=platform.instance, raise_on_error=False
    )
    assert changefeed_key("Account") not in {m.asset_key for m in run.get_asset_materialization_events()}

    DeltaTable(table_path).restore(good_version)  # what the check's description advises
    _, fixed = landing_run(platform, [event("Account", "UPDATE", [ACC], 3, tx="c", Name="Acme 3")])
    assert fixed.success
    requested, cursor = automation_requests(platform, cursor)
    assert requested == {changefeed_key("Account")}

    # An export that fails (here: a fault before its file is renamed into place) is asked again at the next retry
    # tick, not only after the replica's next materialization.
    monkeypatch.setenv("CDC_FAULT_POINT", "changefeed.before_rename")
    assert not platform.execute(dg.RunRequest(asset_selection=sorted(requested))).success
    monkeypatch.delenv("CDC_FAULT_POINT")
    now = datetime.now(UTC)
    requested, cursor = automation_requests(platform, cursor, at=now)
    assert requested == set()
    requested, cursor = automation_requests(platform, cursor, at=now + timedelta(minutes=6))
    assert requested == {changefeed_key("Account")}


def test_runs_show_only_mode_objects_and_reason_and_keep_the_rest_hidden(platform):
    request, _ = landing_run(
        platform, [event("Contact", "CREATE", [CON], 1, tx="c", LastName="Lovelace")], checks=False
    )
    shown = {k for k in request.tags if not k.startswith(".dagster/")}
    # Beside ours, Dagster's own run priority, which its queue reads by that key (sensors/landing_zone.py).
    assert shown == {*VISIBLE, PRIORITY_TAG} and request.tags[PRIORITY_TAG] == "10", request.tags
    assert request.tags["cdc/mode"] == "apply" and request.tags["cdc/objects"] == "Contact"
    assert request.tags[object_tag("Contact")] == "1"  # what the sensors filter runs by
    [run] = platform.instance.get_runs(filters=dg.RunsFilter(tags={object_tag("Contact"): "1"}))
    assert run.tags["cdc/reason"] == "new landing files"


def test_freshness_from_replication_yaml_becomes_each_replicas_freshness_policy(tmp_path):
    config = parse_config(
        "options: {freshness: 5m}\nobjects: [Account, {name: Contact, freshness: 90s}, {name: Lead, freshness: 2}]\n",
        tmp_path / "replication.yaml",
    )
    assert [config.freshness_of(o) for o in config.objects] == [300.0, 90.0, 2.0]
    assert (
        parse_config("objects: [Account]", tmp_path / "r.yaml").freshness_of(
            parse_config("objects: [Account]", tmp_path / "r.yaml").objects[0]
        )
        == 3600.0
    )  # freshness_seconds
    with pytest.raises(ConfigError, match=r"objects\[0\]\.freshness"):
        parse_config("objects: [{name: Account, freshness: soon}]", tmp_path / "replication.yaml")

    from definitions import build_defs

    path = tmp_path / "replication.yaml"
    path.write_text("options: {freshness: 5m, initial_load: false}\nobjects: [Account]\n")
    graph = build_defs(
        config_path=path, landing_path=str(tmp_path / "l"), warehouse_root=str(tmp_path / "w")
    ).resolve_asset_graph()
    policy = graph.get(replica_key("Account")).freshness_policy
    assert policy.fail_window.to_timedelta() == timedelta(minutes=5)


def test_every_asset_shows_a_name_of_its_own_where_dagster_names_it(tmp_path):
    """The lineage graph and the asset list name a node by its key's last part: the events slice, the replica, its
    changefeed and its history of one object are four names, not four nodes called `Account`."""
    from definitions import build_defs

    path = tmp_path / "replication.yaml"
    path.write_text(
        "options: {initial_load: false, changefeed: {uri: feeds}}\nobjects: [{name: Account, history: true}, Contact]\n"
    )
    graph = build_defs(
        config_path=path, landing_path=str(tmp_path / "l"), warehouse_root=str(tmp_path / "w")
    ).resolve_asset_graph()
    shown = [key.path[-1] for key in graph.get_all_asset_keys()]
    assert sorted(shown) == sorted(
        [
            "landing_zone",
            "change_events",
            *("Account_events", "Account", "Account_changefeed", "Account_history"),
            *("Contact_events", "Contact", "Contact_changefeed"),
        ]
    )


def test_a_replica_update_between_the_feeds_request_and_the_next_evaluation_is_still_exported(platform):
    """The daemon's tick requests the feed; its export runs and ends; the replica then changes before the next
    tick. That tick sees both "the feed was newly requested" and "its replica was updated": the update is newer than
    the export and must make the feed due (else, under the daemon, the feed stays one version behind for good)."""
    _, _first = landing_run(platform, [event("Account", "CREATE", [ACC], 1, tx="a", Name="Acme")])
    requested, cursor = automation_requests(platform)
    assert requested == {changefeed_key("Account")}
    assert platform.execute(dg.RunRequest(asset_selection=sorted(requested))).success  # exports through it
    _, second = landing_run(platform, [event("Account", "UPDATE", [ACC], 2, tx="b", Name="Acme 2")])
    assert second.success
    replica_version = DeltaTable(str(platform.warehouse / "Account")).version()

    for _ in range(3):  # the next ticks, each export run as the daemon would
        requested, cursor = automation_requests(platform, cursor)
        if requested:
            assert platform.execute(dg.RunRequest(asset_selection=sorted(requested))).success
    latest = platform.instance.get_latest_materialization_event(changefeed_key("Account"))
    position = latest.asset_materialization.metadata["position"].value
    assert position == replica_version, f"the feed stopped at replica version {position} of {replica_version}"
