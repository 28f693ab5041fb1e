"""resources.spark_warm_up: the Spark Connect server's warm-up takes the paths a run takes (the parse's typed
checks and flattening, the fold), so the JIT compiles those; a warm-up whose lines were quarantined would warm the
wrong code. The server running it in the background beside real runs: tests/resources/test_spark_connect.py."""

from __future__ import annotations

from resources.spark_warm_up import DESCRIBE, warm_up


def test_the_synthetic_lines_parse_clean_and_fold_into_every_column(spark):
    result = warm_up(spark, lines=2_000)
    assert (result.changes, result.quarantined, result.records) == (2_000, 0, 500)
    # All but the compound parent (its parts are columns) and the fields only the org gives (never in an event).
    columns = {f["name"] for f in DESCRIBE["fields"]} - {"ShippingAddress", "IsDeleted", "SystemModstamp"}
    assert set(result.filled) == columns, columns - set(result.filled)
