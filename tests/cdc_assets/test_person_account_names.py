"""Person accounts created and renamed in the org end equal in the replica once reconciled (README, "Counts":
`names_to_fetch`), against the real HTTPS emulator through Dagster's real materialize() and the real
reconciliation sensor, in an org whose locale orders names last name first.

No change event carries a person account's formatted Name (the org derives it from the parts by its locale), so
the apply step stores the parts and leaves the record dirty; the reconcile run fetches the org's Name by id.
"""

from __future__ import annotations

import dagster as dg
import pytest
from harness import Platform
from org_compare import differences
from settings import TEST_SPARK_CONF

from cdc_assets.names import TAG_MODE
from object_schema.describe import ObjectSchema
from replication.apply import EVENT_COUNTS
from resources.salesforce import SalesforceResource
from salesforce_emulator import Emulator
from salesforce_emulator.workload import Workload


@pytest.fixture
def org(tmp_path):
    """An org in an eastern-order locale: a person's Name puts the last name first, as no rule of ours guesses."""
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", name_order="eastern") as emu:
        yield emu


def make_platform(tmp_path, emu: Emulator) -> Platform:
    salesforce = SalesforceResource(instance_url=emu.instance_url, access_token=emu.token, ca_bundle=str(emu.ca_file))
    return Platform(tmp_path / "p", None, ["Account"], TEST_SPARK_CONF, salesforce=salesforce, initial_load=True)


def catch_up(platform: Platform, emu: Emulator) -> dict:
    """Land the org's pending events and apply them; the Account run's metadata."""
    emu.flush_cdc()
    return platform.materialization(platform.run(close_after=0), "Account")


def adds_up(meta: dict) -> bool:
    return meta["events_read"] == sum(meta[k] for k in EVENT_COUNTS if k != "events_read")


def reconcile(platform: Platform) -> list[dg.RunRequest]:
    """Evaluate the reconciliation sensor and run what it requests, as the daemon would."""
    return platform.run_sensor()


def reconciled(platform: Platform, emu: Emulator) -> bool:
    """One reconcile run, after which the replica equals the org and nothing is left to fetch."""
    assert [r.tags[TAG_MODE] for r in reconcile(platform)] == ["reconcile"]
    assert differences(emu, "Account", platform.rows("Account"), limit=0) == []
    return reconcile(platform) == []


def test_person_accounts_created_and_renamed_equal_the_org_after_the_reconcile(tmp_path, org):
    workload = Workload(org, seed=21, person_accounts=True)
    workload.build_org(accounts=10)
    platform = make_platform(tmp_path, org)
    platform.run()  # initial load: the org's Names, as Bulk returns them
    assert differences(org, "Account", platform.rows("Account")) == []

    with org.store.transaction() as txn:
        ada = txn.create("Account", {"IsPersonAccount": True, "FirstName": "Ada", "LastName": "Lovelace"})
        acme = txn.create("Account", {"Name": "Acme"})
    workload.run(changes=60)
    meta = catch_up(platform, org)
    rows = platform.rows("Account")
    assert (rows[ada]["FirstName"], rows[ada]["LastName"], rows[ada]["Name"]) == ("Ada", "Lovelace", None)
    assert rows[ada]["_sf_dirty_since"] is not None  # its Name is the org's to say
    assert (rows[acme]["Name"], rows[acme]["_sf_dirty_since"]) == ("Acme", None)  # text: applied as it came
    assert meta["names_to_fetch"] >= 1 and meta["dirty_records"] >= 1 and adds_up(meta)
    assert reconciled(platform, org)
    assert platform.rows("Account")[ada]["Name"] == "Lovelace Ada"

    with org.store.transaction() as txn:
        txn.update("Account", ada, {"LastName": "King", "MiddleName": "Byron"})
        txn.update("Account", acme, {"Name": "Acme Corp"})
    workload.run(changes=150)  # person accounts renamed among other changes
    meta = catch_up(platform, org)
    rows = platform.rows("Account")
    assert (rows[ada]["MiddleName"], rows[ada]["LastName"]) == ("Byron", "King")  # the parts, applied
    assert (rows[ada]["Name"], rows[ada]["_sf_dirty_since"] is not None) == ("Lovelace Ada", True)  # to fetch
    assert (rows[acme]["Name"], rows[acme]["_sf_dirty_since"]) == ("Acme Corp", None)
    parts = set(ObjectSchema.from_describe(org.store.describe("Account")).person_name_parts)
    renames = {
        e["record_id"]
        for e in platform.change_events()
        if e["change_type"] == "UPDATE" and parts & set(e["set_fields"]) and e["record_id"] != ada
    }
    assert renames, "the workload renamed no person account"
    assert meta["names_to_fetch"] >= 1 and adds_up(meta)
    assert reconciled(platform, org)
    rows = platform.rows("Account")
    assert rows[ada]["Name"] == org.store.get_row("Account", ada)["Name"] == "King Ada Byron"
    assert all(rows[r]["Name"] == org.store.get_row("Account", r)["Name"] for r in renames)


def test_accounts_created_and_renamed_without_person_accounts_equal_the_org_with_no_reconcile(tmp_path):
    """An org without person accounts describes Account.Name as its own compound parent: plain text. Creates and
    renames apply as they come: nothing to fetch, nothing dirty, no reconcile run, and the replica equals the org."""
    with Emulator(tmp_path / "org", landing_dir=tmp_path / "p" / "landing", person_accounts=False) as org:
        workload = Workload(org, seed=21)
        workload.build_org(accounts=10)
        platform = make_platform(tmp_path, org)
        platform.run()  # initial load
        with org.store.transaction() as txn:
            acme = txn.create("Account", {"Name": "Acme"})
        for name in ("Acme Corp", "Acme Holdings"):
            with org.store.transaction() as txn:
                txn.update("Account", acme, {"Name": name})
        with org.store.transaction() as txn:
            txn.update("Account", acme, {"Phone": "555-0100"})
        workload.run(changes=60)
        meta = catch_up(platform, org)
        row = platform.rows("Account")[acme]
        assert (row["Name"], row["Phone"], row["_sf_dirty_since"]) == ("Acme Holdings", "555-0100", None)
        assert (meta["names_to_fetch"], meta["dirty_records"], meta["dirty_skipped"]) == (0, 0, 0) and adds_up(meta)
        assert reconcile(platform) == []
        assert differences(org, "Account", platform.rows("Account"), limit=0) == []
