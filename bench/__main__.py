"""`python -m bench [catchup] [--small]`: run the benchmarks and print their figures (see README)."""

from __future__ import annotations

import argparse
import json
import platform

from bench import catchup


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--small", action="store_true", help="a quick run (10x fewer events)")
    args = parser.parse_args()
    scale = 10 if args.small else 1
    rows = catchup.run(accounts=2500 // scale, changes=40_000 // scale)
    print(f"machine: {platform.machine()} {platform.processor() or ''} python {platform.python_version()}")
    header = ("workload", "events", "wall_s", "events_per_s", "x_floor", "x_naive", "peak_rss_mb")
    print(" | ".join(header))
    for r in rows:
        print(" | ".join(f"{r[h]:,.2f}" if isinstance(r[h], float) else str(r[h]) for h in header))
        print("  spark start %.1fs; phases: %s" % (r["spark_start_s"], json.dumps(
            {k: round(v, 2) for k, v in sorted(r["phases"].items())})))
        print("  rows:", r["rows"])


if __name__ == "__main__":
    main()
