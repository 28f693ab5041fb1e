"""The replication engine: what a run does to the tables, with no Dagster in it (tests/test_layout.py holds it to
that). `cdc_assets/` declares the Dagster definitions that call it; docs/development/layout.md draws the layers.
"""
