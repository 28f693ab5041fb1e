"""Run one platform pass in a separate process (used by crash tests to SIGKILL a real run).

Usage: python tests/crash_runner.py <root> <describe_dir> <objects comma-separated>
"""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from settings import TEST_SPARK_CONF  # noqa: E402
from harness import Platform  # noqa: E402

if __name__ == "__main__":
    root, describe_dir, objects = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(",")
    Platform(root, describe_dir, objects, TEST_SPARK_CONF).run()
