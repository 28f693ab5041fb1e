"""replication.yaml is validated as a whole: a typo or a wrong type anywhere is an error naming the file and the key's
path; every shipped config loads; objects inherit object settings from `options`; the site's option reference is
the models' own."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import pytest
from docs_pages import DOCS, code_blocks, generator
from harness import write_config
from settings import REPO

from replication.config import ConfigError, PollOptions, load_config, reference


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "replication.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return str(caught.value)


@pytest.mark.parametrize(
    ("yaml_text", "where", "suggestion"),
    [
        ("optoins: {initial_load: false}\nobjects: [Account]\n", "optoins", "options"),
        (
            "options: {transaction_close_afer: 5}\nobjects: [Account]\n",
            "options.transaction_close_afer",
            "transaction_close_after",
        ),
        ("options: {poll_overlapp: 5}\nobjects: [Account]\n", "options.poll_overlapp", "poll_overlap"),
        (
            "objects:\n  - Account\n  - {name: Campaign, mode: poll, pol_interval: 60}\n",
            "objects[1].pol_interval",
            "poll_interval",
        ),
        ("objects:\n  - {name: Account, describ: a.json}\n", "objects[0].describ", "describe"),
    ],
)
def test_an_unknown_key_is_an_error_naming_file_path_and_the_closest_option(tmp_path, yaml_text, where, suggestion):
    path = write(tmp_path, yaml_text)
    message = error_of(path)
    assert f"{path}: {where}: unknown key (did you mean {suggestion}?)" in message


def test_a_key_nothing_resembles_lists_the_known_keys(tmp_path):
    message = error_of(write(tmp_path, "objects:\n  - {name: Account, zzz: 1}\n"))
    assert "objects[0].zzz: unknown key; known keys: " in message and "poll_interval" in message


@pytest.mark.parametrize(
    ("yaml_text", "where", "got"),
    [
        ("options: {transaction_close_after: soon}\n", "options.transaction_close_after", "'soon'"),
        ("options: {initial_load: maybe}\n", "options.initial_load", "'maybe'"),
        ("options: {poll_interval: [1, 2]}\n", "options.poll_interval", "[1, 2]"),
        ("options: {api_budget_reserve: 2}\n", "options.api_budget_reserve", "2"),
        ("objects:\n  - {name: Campaign, mode: pol}\n", "objects[0].mode", "'pol'"),
        ("objects:\n  - Account\n  - {name: Campaign, poll_page_size: 1.5}\n", "objects[1].poll_page_size", "1.5"),
        ("objects:\n  - {describe: a.json}\n", "objects[0].name", "{'describe': 'a.json'}"),
        ("objects: Account\n", "objects", "'Account'"),
        ("- Account\n", "(top level)", "['Account']"),
    ],
)
def test_a_wrong_value_is_an_error_naming_file_path_and_value(tmp_path, yaml_text, where, got):
    path = write(tmp_path, yaml_text)
    assert re.search(rf"^{re.escape(f'{path}: {where}: ')}.*\(got {re.escape(got)}\)$", error_of(path), re.M)


def test_every_problem_is_reported_at_once(tmp_path):
    message = error_of(
        write(
            tmp_path,
            """\
        options: {transaction_close_afer: 5, freshness_seconds: never}
        objects:
          - {name: Account, pol_interval: 1}
    """,
        )
    )
    assert message.splitlines()[0].endswith("3 problem(s) in the replication config (options: replication/config.py)")
    for where in ("options.transaction_close_afer", "options.freshness_seconds", "objects[0].pol_interval"):
        assert where in message


def test_a_file_that_is_not_yaml_is_an_error_naming_it(tmp_path):
    path = write(tmp_path, "options: {initial_load: true\n")
    assert error_of(path).startswith(f"{path}: not valid YAML: ")


def test_an_object_listed_twice_is_an_error(tmp_path):
    assert "objects: Value error, listed more than once: Account" in error_of(
        write(tmp_path, "objects: [Account, Contact, Account]\n")
    )


def test_objects_take_object_settings_from_options_unless_they_set_them(tmp_path):
    config = load_config(
        write(
            tmp_path,
            """\
        options: {poll_overlap: 7, bucket_chars: 10, transaction_close_after: 5}
        objects:
          - Account
          - {name: Campaign, source: poll, poll_interval: 60, bucket_chars: 12, describe: d/Campaign.json}
    """,
        )
    )
    account, campaign = config.objects
    assert (account.source, account.bucket_chars, account.describe_path) == ("cdc", 10, None)
    assert account.poll == PollOptions(
        interval=300.0, overlap=7.0, hard_delete_check_every=86400.0, rest_max_records=2000, page_size=50_000
    )
    assert (campaign.source, campaign.bucket_chars, campaign.poll.interval, campaign.poll.overlap) == (
        "poll",
        12,
        60,
        7,
    )
    assert campaign.describe_path == (tmp_path / "d" / "Campaign.json").resolve()
    assert (config.transaction_close_after, config.initial_load, config.names) == (5.0, True, ["Account", "Campaign"])


def test_the_old_key_mode_still_loads_as_source_with_a_warning_naming_file_object_and_new_key(tmp_path, caplog):
    path = write(tmp_path, "objects:\n  - Account\n  - {name: Campaign, mode: poll}\n")
    with caplog.at_level(logging.WARNING, logger="replication.config"):
        config = load_config(path)
    assert [o.source for o in config.objects] == ["cdc", "poll"]
    assert [r.getMessage() for r in caplog.records if r.name == "replication.config"] == [
        f"{path}: object Campaign: `mode` is deprecated, rename it to `source` (`source: poll`)"
    ]


def test_an_object_giving_both_mode_and_source_is_an_error(tmp_path):
    path = write(tmp_path, "objects:\n  - {name: Campaign, mode: poll, source: cdc}\n")
    assert f"{path}: objects[0]: Value error, `mode` is the old name of `source`: give `source` only" in error_of(path)


def test_an_empty_file_is_no_objects_with_every_default(tmp_path):
    config = load_config(write(tmp_path, "options:\n"))
    assert config.objects == () and config.options.freshness_seconds == 3600.0


@pytest.mark.parametrize("name", ["replication.yaml", "samples/basic.replication.yaml"])
def test_the_shipped_configs_load(name):
    config = load_config(REPO / name)
    assert config.names and all(o.describe_path is None or o.describe_path.is_absolute() for o in config.objects)


def test_the_configs_tests_write_load(tmp_path, sample_dir):
    path = write_config(
        tmp_path / "r.yaml",
        sample_dir / "describe",
        ["Account", "Contact"],
        close_after=0,
        retry_backoff_seconds=0,
        max_line_bytes=4096,
        max_ingest_batch_bytes=1,
        subscriber_max_lag_seconds=60,
        dirty_threshold_seconds=1e9,
        freshness_seconds=1e9,
    )
    config = load_config(path)
    assert (config.options.max_line_bytes, config.options.retry_backoff_seconds) == (4096, 0.0)
    assert config.objects[0].load_describe()["name"] == "Account"


def test_the_sites_example_loads_and_its_reference_is_generated_from_the_models(tmp_path):
    example = code_blocks("replication.yaml", "yaml")[0]
    assert load_config(write(tmp_path, example)).names == ["Account", "Contact", "Campaign"]
    page = (DOCS / "reference" / "replication-yaml.md").read_text()
    assert "<!-- generated: replication-options -->" in page
    assert reference() in generator().expand(page)  # written from the models when the site is built


@pytest.mark.parametrize(
    ("yaml_text", "where", "got"),
    [
        ("objects: [../../etc]\n", "objects[0].name", "'../../etc'"),
        ('objects:\n  - {name: "Account\\n"}\n', "objects[0].name", "'Account\\n'"),
        (f"objects: [{'A' * 81}]\n", "objects[0].name", f"'{'A' * 81}'"),
        ("objects: [Invoice___c]\n", "objects[0].name", "'Invoice___c'"),
        ("objects: [Invoice_]\n", "objects[0].name", "'Invoice_'"),
        ("objects: [1Account]\n", "objects[0].name", "'1Account'"),
        ("objects:\n  - {name: Account, fields: {include: [Name, 'x/y']}}\n", "objects[0].fields.include[1]", "'x/y'"),
        ("objects:\n  - {name: Account, fields: {exclude: ['a b']}}\n", "objects[0].fields.exclude[0]", "'a b'"),
        ('objects:\n  - {name: Contact, hash: [Email, "Phone\'--"]}\n', "objects[0].hash[1]", '"Phone\'--"'),
        ("objects:\n  - {name: Contact, formulas: {fields: [../x]}}\n", "objects[0].formulas.fields[0]", "'../x'"),
    ],
)
def test_a_name_salesforce_could_not_give_an_object_or_field_is_an_error(tmp_path, monkeypatch, yaml_text, where, got):
    monkeypatch.setenv("CDC_HASH_SALT", "s" * 32)
    path = write(tmp_path, yaml_text)
    message = error_of(path)
    assert re.search(
        rf"^{re.escape(f'{path}: {where}: ')}.*not an object or field name: .*\(got {re.escape(got)}\)$", message, re.M
    ), message


@pytest.mark.parametrize(
    "name",
    [
        "Account",
        "Invoice__c",
        "ns__Invoice__c",
        "SBQQ__Quote__c",
        "Order_Item_2__c",
        "Alert__e",
        "Location__Latitude__s",
        "Invoice__ChangeEvent",
        "A" * 80,
    ],
)
def test_salesforce_api_names_are_accepted(tmp_path, name):
    assert load_config(write(tmp_path, f"objects:\n  - {{name: {name}, fields: {{include: [{name}]}}}}\n")).names == [
        name
    ]


def test_the_subscriber_reads_its_objects_through_the_validated_model(tmp_path):
    from cdc_subscriber.cli import cdc_entities

    with pytest.raises(ConfigError, match=r"objects\[1\]\.name: .*not an object or field name"):
        cdc_entities(write(tmp_path, "objects: [Account, ../../etc]\n"))


def test_spark_applies_the_same_api_name_rule(spark):
    from shared.names import API_NAME_SQL, is_api_name
    from spark_ops.sql import literal

    names = ["Account", "ns__Invoice__c", "Account\n", "../../etc", "A" * 80, "A" * 81, "Invoice___c", "Invoice_"]
    rows = (
        spark.createDataFrame([(n,) for n in names], "name string")
        .selectExpr("name", f"name RLIKE {literal(API_NAME_SQL)} AS ok")
        .collect()
    )
    assert {r.name: r.ok for r in rows} == {n: is_api_name(n) for n in names}
    assert [n for n in names if is_api_name(n)] == ["Account", "ns__Invoice__c", "A" * 80]
