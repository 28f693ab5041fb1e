"""The generated parts of the documentation site, written from the code when the site is built.

A page asks for one with a marker line, replaced by this MkDocs hook (`hooks:` in mkdocs.yml) on every build and
every `mkdocs serve` reload, so the site cannot drift from the code it describes:

- `<!-- generated: replication-options -->`: every replication.yaml option, from the config models
  (`replication.config.reference`, which `python -m replication.config` prints too);
- `<!-- generated: dagster-definitions -->`: every asset, check, sensor, job and schedule `build_defs` makes, for
  configurations that switch each per-object capability on, with the objects each one is made for;
- `<!-- generated: help <module> [<subcommand>] -->`: what `python -m <module> [<subcommand>] --help` prints.

`python docs/generate.py <page.md>` prints a page as the site shows it.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import runpy
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

MARKER = re.compile(r"^<!-- generated: (?P<what>[^>]*?) -->$", re.M)
HELP_COLUMNS = "100"


def expand(markdown: str) -> str:
    """The page with every marker replaced by what it names."""
    return MARKER.sub(lambda m: generated(m.group("what")), markdown)


def generated(what: str) -> str:
    if str(REPO) not in sys.path:  # inside `mkdocs`, which restores sys.path after loading its hooks
        sys.path.insert(0, str(REPO))
    words = what.split()
    if words[0] == "help" and len(words) > 1:
        return help_text(*words[1:])
    if what in GENERATORS:
        return GENERATORS[what]()
    raise ValueError(f"docs: unknown generated part {what!r}: one of {', '.join(GENERATORS)}, or help <module>")


def on_page_markdown(markdown: str, **_: object) -> str:
    """The MkDocs hook."""
    return expand(markdown)


def replication_options() -> str:
    from replication.config import reference

    return reference()


def help_text(module: str, *args: str) -> str:
    """What `python -m <module> <args> --help` prints, run in this process (the modules' imports are shared)."""
    out, argv, columns = io.StringIO(), sys.argv, os.environ.get("COLUMNS")
    sys.argv, os.environ["COLUMNS"] = [module, *args, "--help"], HELP_COLUMNS
    try:
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            runpy.run_module(module, run_name="__main__", alter_sys=False)
    finally:
        sys.argv = argv
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    text = out.getvalue().rstrip()
    if not text.startswith("usage:"):
        raise ValueError(f"docs: `python -m {' '.join((module, *args))} --help` printed no usage:\n{text[:500]}")
    return f"```text\n{text}\n```"


# The definitions for two objects, one per source, with each per-object capability switched on in turn: what appears
# only with a capability is made for the objects that have it.
OBJECTS = {"Account": "cdc", "Campaign": "poll"}
CAPABILITIES = {"": {}, "history": {"history": True}, "changefeed": {"changefeed": {}}, "formulas": {"formulas": {}}}
ASSET_ORDER = ("landing_zone", "change_events", "events", "salesforce", "changefeed", "salesforce_history")
PLACEHOLDER = "<Object>"


@dataclass
class Definition:
    kind: str
    name: str
    columns: dict[str, str]
    found: set[tuple[str, str]] = field(default_factory=set)  # (capability, source or "") it was made for

    def made_for(self) -> str:
        capability = sorted({c for c, _ in self.found}, key=list(CAPABILITIES).index)[0]
        sources = {m for c, m in self.found if c == capability}
        who = (
            "once"
            if sources == {""}
            else "every object"
            if sources == set(OBJECTS.values())
            else " / ".join(f"`source: {m}` objects" for m in sorted(sources))
        )
        if not capability:
            return who
        return (
            f"once, when an object has `{capability}`"
            if who == "once"
            else f"objects with `{capability}`" + ("" if who == "every object" else f" ({who})")
        )


def dagster_definitions() -> str:
    found: dict[tuple[str, str], Definition] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for capability, settings in CAPABILITIES.items():
            config = Path(tmp) / f"replication{capability}.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "options": {"initial_load": True},
                        "objects": [{"name": name, "source": source, **settings} for name, source in OBJECTS.items()],
                    }
                )
            )
            for definition, source in _definitions(config, tmp):
                known = found.setdefault((definition.kind, definition.name), definition)
                known.columns = {k: _common(v, definition.columns[k]) for k, v in known.columns.items()}
                known.found.add((capability, source))
    out = []
    for kind, title in (
        ("asset", "Assets"),
        ("check", "Asset checks"),
        ("sensor", "Sensors"),
        ("job", "Jobs"),
        ("schedule", "Schedules"),
    ):
        rows = [d for d in found.values() if d.kind == kind]
        if kind in ("asset", "check"):
            rows.sort(key=lambda d: (ASSET_ORDER.index(d.name.split("/")[0].split(":")[0]), d.name))
        headers = ["Name", *rows[0].columns, "For"] if rows else []
        out += [f"## {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join([f"`{d.name}`", *d.columns.values(), d.made_for()]) + " |" for d in rows]
        out.append("")
    return "\n".join(out)


def _definitions(config: Path, tmp: str) -> list[tuple[Definition, str]]:
    """Every definition `build_defs` makes for `config`, named with <Object> for the object it is made for."""
    from definitions import build_defs

    defs = build_defs(config_path=config, landing_path=f"{tmp}/landing", warehouse_root=f"{tmp}/warehouse")
    graph = defs.get_repository_def().asset_graph
    made: list[tuple[Definition, str]] = []

    def add(kind: str, name: str, columns: dict[str, str]) -> None:
        mode = next((m for o, m in OBJECTS.items() if re.search(_named(o), name)), "")
        made.append((Definition(kind, _generic(name, tmp), {k: _cell(v, tmp) for k, v in columns.items()}), mode))

    for spec in defs.resolve_all_asset_specs():
        add(
            "asset",
            spec.key.to_user_string(),
            {
                "Kinds": ", ".join(sorted(spec.kinds)),
                "Group": spec.group_name or "",
                "Depends on": ", ".join(f"`{d.asset_key.to_user_string()}`" for d in spec.deps),
                "Description": spec.description or "",
            },
        )
    for key in graph.asset_check_keys:
        spec = graph.get_check_spec(key)
        add(
            "check",
            f"{key.asset_key.to_user_string()}: {key.name}",
            {"Blocking": "yes" if spec.blocking else "no", "Description": spec.description or ""},
        )
    for sensor in defs.sensors or []:
        add(
            "sensor",
            sensor.name,
            {"Every": f"{sensor.minimum_interval_seconds} s", "Description": sensor.description or ""},
        )
    for job in defs.jobs or []:
        add("job", job.name, {"Description": job.description or ""})
    for schedule in defs.schedules or []:
        add("schedule", schedule.name, {"Cron": f"`{schedule.cron_schedule}`", "Job": f"`{schedule.job_name}`"})
    return made


def _generic(text: str, tmp: str) -> str:
    text = text.replace(f"{tmp}/", "")
    for name in OBJECTS:
        text = re.sub(_named(name), PLACEHOLDER, text)
    return text


def _named(name: str) -> str:
    """An object's name in a longer one (`poll_Account`, `Account__history`), not in another word."""
    return rf"(?<![A-Za-z0-9]){name}(?![A-Za-z0-9])"


def _cell(text: str, tmp: str) -> str:
    """A table cell: one line, `|` escaped, `<Object>` outside code spans kept out of HTML."""
    parts = " ".join(_generic(text, tmp).split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def _common(one: str, other: str) -> str:
    """What two objects' texts of one definition share: the whole text, else the sentences both begin with."""
    if one == other:
        return one
    shared = [a for a, b in zip(re.split(r"(?<=\.) ", one), re.split(r"(?<=\.) ", other)) if a == b]
    return " ".join(shared)


GENERATORS: dict[str, Callable[[], str]] = {
    "replication-options": replication_options,
    "dagster-definitions": dagster_definitions,
}


if __name__ == "__main__":
    for page in sys.argv[1:]:
        print(expand(Path(page).read_text()), end="")
