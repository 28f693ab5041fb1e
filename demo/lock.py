"""constraints.txt, the versions CI tested: every distribution the project's install targets bring in (the project's
requirements with the extras `make install`, `install-docs`, `install-lint` and `e2e` name, and theirs, followed
through the installed metadata), pinned at the version installed in this venv.

Followed from the project's own requirements rather than copied from `pip freeze`, so a tool a developer installed by
hand into the venv never becomes a pin. `make lock` writes it; every install target of the Makefile passes it to pip
with `-c`, so a fresh machine gets these versions whatever PyPI released since.
"""

from __future__ import annotations

import importlib.metadata as md
import sys

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

PROJECT = "sf-cdc-delta"
EXTRAS = ("test", "emulator", "docs", "lint", "e2e")
HEADER = """\
# The versions CI tested, passed to pip with -c by every install target of the Makefile. Written by `make lock`
# (demo/lock.py) from the venv; edit pyproject.toml, not this file (docs/development/index.md: updating the pins).
"""


def _installed() -> dict[NormalizedName, md.Distribution]:
    # The first of a name on sys.path, as an import finds it: setuptools puts its vendored copies (packaging,
    # more-itertools, ...) on sys.path once imported, after the venv's own.
    found: dict[NormalizedName, md.Distribution] = {}
    for d in md.distributions():
        found.setdefault(canonicalize_name(d.metadata["Name"]), d)
    return found


def needed(project: str = PROJECT, extras: tuple[str, ...] = EXTRAS) -> dict[NormalizedName, str]:
    """Name -> installed version of every distribution the project needs with `extras`, itself left out.

    A requirement whose marker holds for none of the extras asked of its distribution (nor for none) is not
    followed, as pip would not install it; one not installed here (an extra whose install target has not run) is
    left out.
    """
    installed = _installed()
    extras_of: dict[NormalizedName, set[str]] = {}
    todo = [(canonicalize_name(project), set(extras))]
    while todo:
        name, asked = todo.pop()
        dist = installed.get(name)
        seen = extras_of.get(name)
        if dist is None or (seen is not None and asked <= seen):
            continue
        extras_of[name] = (seen or set()) | asked
        for line in dist.requires or []:
            req = Requirement(line)
            environments = [{"extra": e} for e in ("", *extras_of[name])]
            if req.marker is None or any(req.marker.evaluate(env) for env in environments):
                todo.append((canonicalize_name(req.name), set(req.extras)))
    extras_of.pop(canonicalize_name(project), None)
    return {name: installed[name].version for name in sorted(extras_of)}


def render(pins: dict[NormalizedName, str]) -> str:
    return HEADER + "".join(f"{name}=={version}\n" for name, version in pins.items())


if __name__ == "__main__":
    sys.stdout.write(render(needed()))
