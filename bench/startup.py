"""A run worker's start-up before its first step, in fresh processes: Python with Dagster, then `import definitions`
(every module the code location needs), then `build_defs` for replication.yaml. Each tree is measured the same number
of times, interleaved, so a baseline (another checkout, e.g. `main`) and this one share the machine's load.

`python -m bench.startup [--baseline /path/to/other/checkout] [--times 5]`; prints medians and the ratio.

`--warm` measures what a run worker kept warm would save: the same start-up (import Dagster, `import definitions`,
`build_defs`), from the request to the end, in a fresh interpreter (what Dagster's DefaultRunLauncher starts for
every run: its code server spawns one) against a child forked from a server process that imported Dagster and
`definitions` once (`multiprocessing`'s forkserver with them preloaded), interleaved.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, time
t0 = time.perf_counter()
import dagster
t1 = time.perf_counter()
import definitions
t2 = time.perf_counter()
definitions.build_defs(config_path="replication.yaml", landing_path="landing", warehouse_root="warehouse")
t3 = time.perf_counter()
import sys
print(json.dumps({"dagster": t1 - t0, "definitions": t2 - t1, "build_defs": t3 - t2,
                  "pandera": "pandera" in sys.modules, "pyspark.pandas": "pyspark.pandas" in sys.modules}))
"""
PHASES = ("dagster", "definitions", "build_defs")


def worker_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CDC_", "SF_"))}
    return env | {"PYTHONPATH": str(tree), "SF_INSTANCE_URL": "https://127.0.0.1:9", "SF_ACCESS_TOKEN": "unused"}


def measure(tree: Path) -> dict:
    """One fresh interpreter importing `tree`'s code (its directory first on the path, as a run worker has it)."""
    env = worker_env(tree)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(trees: dict[str, Path], times: int = 5) -> dict[str, dict]:
    samples: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(times):
        for name, tree in trees.items():
            samples[name].append(measure(tree))
    return {
        name: {
            **{p: statistics.median(s[p] for s in rows) for p in PHASES},
            "total": statistics.median(sum(s[p] for p in PHASES) for s in rows),
            "imports pandera": rows[-1]["pandera"],
            "imports pyspark.pandas": rows[-1]["pyspark.pandas"],
        }
        for name, rows in samples.items()
    }


def _build_in_child() -> None:
    """A forked worker's start-up: the modules are there already (preloaded by the server it was forked from)."""
    import definitions

    definitions.build_defs(config_path="replication.yaml", landing_path="landing", warehouse_root="warehouse")


def warm(times: int) -> dict[str, list[float]]:
    """Walls (request -> done) of a fresh interpreter and of a forked warm child, `times` each, interleaved. The
    forkserver starts (and imports Dagster and `definitions`) before the first measurement, as a warm worker would
    have done long before the run."""
    os.chdir(REPO)
    os.environ.update(worker_env(REPO))
    sys.path.insert(0, str(REPO))
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["dagster", "definitions"])

    def forked() -> float:
        started = time.perf_counter()
        child = ctx.Process(target=_build_in_child)
        child.start()
        child.join()
        if child.exitcode:
            raise RuntimeError(f"forked worker exited {child.exitcode}")
        return time.perf_counter() - started

    def spawned() -> float:
        started = time.perf_counter()
        measure(REPO)
        return time.perf_counter() - started

    forked()  # the server's own start: not a run's
    walls: dict[str, list[float]] = {"spawned": [], "forked": []}
    for _ in range(times):
        walls["spawned"].append(spawned())
        walls["forked"].append(forked())
    return walls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with (e.g. main)")
    parser.add_argument("--times", type=int, default=5)
    parser.add_argument("--warm", action="store_true", help="a fresh interpreter against a child forked warm")
    args = parser.parse_args(argv)
    if args.warm:
        walls = warm(args.times)
        load = os.getloadavg()[0]
        spawned, forked = (statistics.median(walls[k]) for k in ("spawned", "forked"))
        print(f"load average {load:.1f}; request -> Dagster, definitions imported and built; {args.times} each")
        print("| worker | median s | min s | max s |")
        print("|---|---|---|---|")
        for key, name, median in (
            ("spawned", "fresh interpreter (spawned)", spawned),
            ("forked", "forked from a warm server", forked),
        ):
            print(f"| {name} | {median:.2f} | {min(walls[key]):.2f} | {max(walls[key]):.2f} |")
        print(f"ratio forked / spawned: {forked / spawned:.3f}")
        return 0
    trees = {"this": REPO} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    figures = run(trees, args.times)
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {args.times} fresh processes, seconds")
    print("| tree | import dagster | import definitions | build_defs | total | pandera | pyspark.pandas |")
    print("|---|---|---|---|---|---|---|")
    for name, f in figures.items():
        print(
            f"| {name} ({trees[name]}) | {f['dagster']:.2f} | {f['definitions']:.2f} | {f['build_defs']:.2f} | "
            f"{f['total']:.2f} | {'yes' if f['imports pandera'] else 'no'} | "
            f"{'yes' if f['imports pyspark.pandas'] else 'no'} |"
        )
    if "baseline" in figures:
        print(
            f"ratio this / baseline: import definitions "
            f"{figures['this']['definitions'] / figures['baseline']['definitions']:.2f}, total "
            f"{figures['this']['total'] / figures['baseline']['total']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
