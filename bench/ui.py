"""`python -m bench.ui [--config replication.yaml] [--home DAGSTER_HOME] [--history 20] [--repeat 5]`: how long the
Dagster UI's pages take to load for a given set of replicated objects, measured as the GraphQL queries the UI sends.

The webserver (`dagster-webserver`, no daemon) serves the platform's code location for `--config` (the number of
objects is the number of entries in it; a generated replication.yaml gives 200 or more). The queries are
the UI's own: their text is read from the installed dagster-webserver's bundled JavaScript (each operation with
the fragments it spreads), so the figures follow the installed version. Three pages, each query sent as the UI
sends it (live data in batches of `LIVE_BATCH` asset keys, `LIVE_PARALLEL` at a time; health in batches of
`HEALTH_BATCH`):

- asset graph (the global lineage): `LocationWorkspaceAssetsQuery`, then for every asset `AssetGraphLiveQuery`,
  `AssetsFreshnessInfoQuery`, `AssetHealthQuery`;
- a replica's page: `AssetViewDefinitionQuery`, `AssetOverviewMetadataEventsQuery`, `AssetChecksQuery`,
  `RecentAssetEventsQuery`, and the live data of the asset;
- the runs list: `RunsFeedRootQuery` (a page of `RUNS_PAGE`), `RunFeedTabsCountQuery`.

History: with `--home` an existing instance (e.g. `.demo/dagster_home` after `make run`); else a new one seeded
with `--history` materializations of every replica (with their metadata and check evaluations) and as many runs
tagged as the sensors tag them. Each page is loaded `--repeat` times; the figure is the median wall time, and
`x_floor` is that over the median of the cheapest GraphQL round trip (`{ version }`) in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg

from cdc_assets.checks import CHECKS
from cdc_assets.names import replica_key, run_tags
from demo import processes
from demo.instance import open_instance, write_dagster_home
from replication.config import read_config

LIVE_BATCH, LIVE_PARALLEL, HEALTH_BATCH = 10, 2, 250  # the UI's live-data batching (dagster-webserver's bundle)
RUNS_PAGE = 25
FLOOR = "query Floor { version }"
WORKSPACE = processes.REPO / "workspace.yaml"


def ui_queries() -> dict[str, str]:
    """Every query of the installed UI, by operation name, with the fragments it uses (transitively)."""
    import dagster_webserver

    blocks: dict[tuple[str, str], str] = {}
    for path in (Path(dagster_webserver.__file__).parent / "webapp" / "build").rglob("*.js"):
        source = path.read_text("utf-8", "replace")
        for _, literal in re.findall(r"""(["'])(\\n\s*(?:query|fragment) (?:[^\\]|\\.)*?)\1""", source):
            text = literal.encode().decode("unicode_escape")  # a JS string literal, "..." or '...'

            for match in re.finditer(r"\b(query|fragment) (\w+)", text):
                start, depth = text.index("{", match.end()), 0
                for end in range(start, len(text)):
                    depth += {"{": 1, "}": -1}.get(text[end], 0)
                    if depth == 0:
                        break
                blocks.setdefault((match.group(1), match.group(2)), text[match.start() : end + 1])
    fragments = {name: text for (kind, name), text in blocks.items() if kind == "fragment"}

    def document(text: str) -> str:
        used, todo = [], re.findall(r"\.\.\.(\w+)", text)
        while todo:
            name = todo.pop()
            if name not in used and name in fragments:
                used.append(name)
                todo += re.findall(r"\.\.\.(\w+)", fragments[name])
        return "\n".join([text, *(fragments[n] for n in used)])

    return {name: document(text) for (kind, name), text in blocks.items() if kind == "query"}


def post(url: str, query: str, variables: dict) -> tuple[float, int]:
    """Seconds and response bytes of one GraphQL request; fails on a GraphQL error."""
    body = json.dumps({"query": query, "variables": variables}).encode()
    request = urllib.request.Request(f"{url}/graphql", data=body, headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            payload = response.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{query.split('(')[0].split('{')[0].strip()}: HTTP {e.code}: {e.read()[:500]!r}") from None
    seconds = time.perf_counter() - started
    if errors := json.loads(payload).get("errors"):
        raise RuntimeError(f"{query.split('(')[0].split('{')[0].strip()}: {errors[0].get('message')}")
    return seconds, len(payload)


def batched(url: str, query: str, keys: list[dict], size: int, parallel: int) -> tuple[float, int]:
    """The UI's batched fetch of `query` over `keys`: wall seconds, total bytes."""
    batches = [keys[i : i + size] for i in range(0, len(keys), size)]
    started = time.perf_counter()
    with ThreadPoolExecutor(parallel) as pool:
        sizes = list(pool.map(lambda b: post(url, query, {"assetKeys": b})[1], batches))
    return time.perf_counter() - started, sum(sizes)


def pages(url: str, queries: dict[str, str], location: str, replica: dict) -> tuple[dict[str, list], int]:
    """page -> [(query name, callable returning (seconds, bytes))], in the order the UI sends them; and how many
    assets the workspace has."""

    def one(name: str, variables: dict):
        return name, lambda: post(url, queries[name], variables)

    def keys() -> list[dict]:
        """Every asset key the workspace query names (as the UI learns them), once."""
        body = json.dumps({"query": queries["LocationWorkspaceAssetsQuery"], "variables": {"name": location}})
        request = urllib.request.Request(
            f"{url}/graphql", data=body.encode(), headers={"Content-Type": "application/json"}
        )
        text = urllib.request.urlopen(request, timeout=600).read().decode()
        paths = {tuple(json.loads(m)) for m in re.findall(r'"assetKey":\s*\{"path":\s*(\[[^\]]*\])', text)}
        return [{"path": list(p)} for p in sorted(paths)]

    all_keys = keys()
    graph = [
        one("LocationWorkspaceAssetsQuery", {"name": location}),
        (
            "AssetGraphLiveQuery",
            lambda: batched(url, queries["AssetGraphLiveQuery"], all_keys, LIVE_BATCH, LIVE_PARALLEL),
        ),
        (
            "AssetsFreshnessInfoQuery",
            lambda: batched(url, queries["AssetsFreshnessInfoQuery"], all_keys, LIVE_BATCH, LIVE_PARALLEL),
        ),
        ("AssetHealthQuery", lambda: batched(url, queries["AssetHealthQuery"], all_keys, HEALTH_BATCH, 4)),
    ]
    asset = [
        one("AssetViewDefinitionQuery", {"assetKey": replica}),
        one("AssetOverviewMetadataEventsQuery", {"assetKey": replica}),
        one("AssetChecksQuery", {"assetKey": replica}),
        one(
            "RecentAssetEventsQuery",
            {
                "assetKey": replica,
                "limit": 100,
                "eventTypeSelectors": ["MATERIALIZATION", "OBSERVATION", "FAILED_TO_MATERIALIZE"],
            },
        ),
        one("AssetGraphLiveQuery", {"assetKeys": [replica]}),
        one("AssetHealthQuery", {"assetKeys": [replica]}),
    ]
    runs = [
        one("RunsFeedRootQuery", {"limit": RUNS_PAGE, "filter": {}, "view": "ROOTS"}),
        one(
            "RunFeedTabsCountQuery",
            {"queuedFilter": {"statuses": ["QUEUED"]}, "inProgressFilter": {"statuses": ["STARTED"]}, "view": "ROOTS"},
        ),
    ]
    return {"asset graph": graph, "replica page": asset, "runs list": runs}, len(all_keys)


def seed(home: Path, names: list[str], history: int) -> None:
    """`history` materializations of every replica (metadata as a replica writes it, six check evaluations each)
    and `history` runs tagged as the landing sensor tags them."""
    from dagster._core.test_utils import create_run_for_test

    with open_instance(home) as instance:
        for i in range(history):
            for name in names:
                instance.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset_key=replica_key(name),
                        metadata={
                            **dict.fromkeys(
                                (
                                    "applied",
                                    "held",
                                    "gaps",
                                    "late",
                                    "rows_written",
                                    "dirty_records",
                                    "delta_version",
                                    "applied_through",
                                ),
                                i,
                            ),
                            "seconds_apply": 1.5,
                            "lag_seconds": 2.0,
                        },
                    )
                )
                for check in CHECKS:
                    instance.report_runless_asset_event(
                        dg.AssetCheckEvaluation(
                            asset_key=replica_key(name), check_name=check, passed=True, metadata={"rows": i}
                        )
                    )
            create_run_for_test(
                instance,
                status=dg.DagsterRunStatus.SUCCESS,
                tags=run_tags(mode="apply", reason="new landing files", objects=names),
            )


def measure(config: Path, home: Path | None, history: int, repeat: int) -> list[dict]:
    names = read_config(config).config.names
    work = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    if home is None:
        home = write_dagster_home(work / "dagster_home")
        seed(home, names, history)
    env = processes.platform_env(
        home=home, config=config, landing=work / "landing", warehouse=work / "warehouse", org={}, sensors_running=False
    )
    port = processes.free_port()
    url = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = processes.start(
        ["dagster-webserver", "-w", str(WORKSPACE), "-h", "127.0.0.1", "-p", str(port)],
        env,
        log_file=work / "webserver.log",
    )
    try:
        location = processes.wait_for_code_location(url, server, timeout_seconds=900)
        loaded = time.perf_counter() - started
        queries = ui_queries()
        by_page, assets = pages(url, queries, location, {"path": list(replica_key(names[0]).path)})
        floor = statistics.median(post(url, FLOOR, {})[0] for _ in range(max(repeat, 5)))
        rows = [
            {
                "page": "code location load",
                "query": "(webserver start to LOADED)",
                "objects": len(names),
                "assets": assets,
                "median_ms": loaded * 1000,
                "max_ms": loaded * 1000,
                "kb": 0,
                "x_floor": None,
            }
        ]
        for page, steps in by_page.items():
            totals = []
            for _ in range(repeat):
                timings = [(name, *fetch()) for name, fetch in steps]
                totals.append(sum(t for _, t, _ in timings))
                for name, seconds, size in timings:
                    rows.append({"page": page, "query": name, "seconds": seconds, "kb": size / 1024})
            rows.append({"page": page, "query": "(page total)", "seconds_all": totals})
        return summarize(rows, floor, len(names), assets)
    finally:
        processes.stop(server)


def summarize(rows: list[dict], floor: float, objects: int, assets: int) -> list[dict]:
    out = [r for r in rows if "median_ms" in r]
    grouped: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "median_ms" not in r:
            grouped.setdefault((r["page"], r["query"]), []).append(r)
    for (page, query), group in grouped.items():
        seconds = group[0]["seconds_all"] if "seconds_all" in group[0] else [g["seconds"] for g in group]
        median = statistics.median(seconds)
        out.append(
            {
                "page": page,
                "query": query,
                "objects": objects,
                "assets": assets,
                "median_ms": median * 1000,
                "max_ms": max(seconds) * 1000,
                "kb": statistics.median(g.get("kb", 0) for g in group),
                "x_floor": median / floor,
            }
        )
    out.append(
        {
            "page": "floor",
            "query": "{ version }",
            "objects": objects,
            "assets": assets,
            "median_ms": floor * 1000,
            "max_ms": floor * 1000,
            "kb": 0,
            "x_floor": 1.0,
        }
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--config",
        type=Path,
        default=processes.REPO / "replication.yaml",
        help="the replication.yaml whose objects the code location loads",
    )
    parser.add_argument("--home", type=Path, help="an existing DAGSTER_HOME (default: a new one, seeded)")
    parser.add_argument("--history", type=int, default=20, help="seeded materializations per replica, and runs")
    parser.add_argument("--repeat", type=int, default=5, help="loads of each page")
    args = parser.parse_args()
    rows = measure(args.config.resolve(), args.home, args.history, args.repeat)
    print(
        f"load average {os.getloadavg()[0]:.2f}; {rows[0]['objects']} objects, {rows[0]['assets']} assets; "
        f"config {args.config}"
    )
    print(f"{'page':<20} {'query':<34} {'median_ms':>10} {'max_ms':>10} {'kb':>9} {'x_floor':>8}")
    for r in rows:
        x = f"{r['x_floor']:.1f}" if r["x_floor"] is not None else ""
        print(f"{r['page']:<20} {r['query']:<34} {r['median_ms']:>10.1f} {r['max_ms']:>10.1f} {r['kb']:>9.1f} {x:>8}")


if __name__ == "__main__":
    main()
