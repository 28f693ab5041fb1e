"""Formula fields as replica columns (replication.yaml `formulas:`; change events never carry them).

- `config.py`: the `formulas:` section (refresh_every, full_every, overlap, fields, merge_rows);
- `rows.py`: Bulk API 2.0 text -> typed formula rows (Id, formula columns, `_sf_formulas_at`);
- `refresh.py`: one refresh run (full or incremental pass, batched merges into the formula columns only,
  resumable from the Bulk job's locator), the design notes;
- `cdc_assets/formulas/freshness.py`: the age of the oldest formula value, the metadata and the check `formulas_fresh`.

The sensor requesting refresh runs is `sensors/formulas.py`.
"""
