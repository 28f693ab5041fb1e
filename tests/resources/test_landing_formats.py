"""resources.landing_zone: the sensor's cheap scan finds the objects a file names, in either landing format."""

from __future__ import annotations

import json

from resources.landing_zone import LandingFile, LandingZone
from salesforce_emulator.landing_lines import event


def test_entities_are_found_in_cometd_and_datastream_files(tmp_path):
    (tmp_path / "cometd.jsonl").write_text(event("Account", "UPDATE", ["001000000000001AAA"], 1, Name="x") + "\n")
    (tmp_path / "ds.jsonl").write_text(
        json.dumps(
            {
                "read_method": "salesforce-cdc",
                "object": "Contact",
                "uuid": "u1",
                "source_metadata": {"object_name": "Contact", "change_type": "UPDATE", "is_deleted": False},
                "payload": {"Id": "003000000000001AAA", "Description": '{"object": "Not this one"}'},
            }
        )
        + "\n"
    )
    landing = LandingZone(path=str(tmp_path))
    files = [LandingFile(p.name, p.stat().st_size) for p in sorted(tmp_path.iterdir())]
    assert landing.entities_in(files[:1]) == {"Account"}
    assert landing.entities_in(files[1:]) == {"Contact"}
