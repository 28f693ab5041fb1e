"""What a code server does before the UI and the daemon can use the platform's code location, per replication.yaml.

A code server (`dagster api grpc`, started by the webserver and the daemon) imports `definitions`, builds them, and
serves a snapshot of the repository: every job's snapshot with its run config schema, every schedule and sensor,
the asset graph. The UI and the daemon load that snapshot whole, and hold it. Measured here in one process, per
config: import, `build_defs`, the repository definition, the snapshot (`RepositorySnap.from_def`, what the code
server builds) and its serialized size, with the number of jobs, schedules, sensors and assets that make it up.

    python -m bench.location CONFIG [CONFIG ...]   (e.g. the replication.yaml of 5 and of 1,000 objects)
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path


def measure(config: Path) -> dict:
    from dagster._core.remote_representation.external_data import RepositorySnap
    from dagster_shared.serdes import serialize_value

    from definitions import build_defs

    work = Path(tempfile.mkdtemp(prefix="bench-location-"))
    started = time.perf_counter()
    defs = build_defs(config_path=config, landing_path=str(work / "landing"), warehouse_root=str(work / "warehouse"))
    built = time.perf_counter()
    repo = defs.get_repository_def()
    resolved = time.perf_counter()
    snap = RepositorySnap.from_def(repo)
    snapped = time.perf_counter()
    size = len(serialize_value(snap))
    serialized = time.perf_counter()
    return {
        "config": str(config),
        "jobs": len(repo.get_all_jobs()),
        "schedules": len(repo.schedule_defs),
        "sensors": len(repo.sensor_defs),
        "assets": len(list(repo.asset_graph.get_all_asset_keys())),
        "build_defs_s": round(built - started, 2),
        "repository_def_s": round(resolved - built, 2),
        "snapshot_s": round(snapped - resolved, 2),
        "serialize_s": round(serialized - snapped, 2),
        "snapshot_mb": round(size / 1e6, 1),
    }


if __name__ == "__main__":
    started = time.perf_counter()
    import definitions  # noqa: F401  (the import a code server pays first)

    print(json.dumps({"import_s": round(time.perf_counter() - started, 2)}), flush=True)
    for arg in sys.argv[1:]:
        print(json.dumps(measure(Path(arg))), flush=True)
