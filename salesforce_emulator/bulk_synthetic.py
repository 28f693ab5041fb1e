"""A bulk-only object of millions of records, generated page by page instead of stored: for benchmarks of initial
loads and resyncs at sizes the SQLite store cannot build in reasonable time (10M records of 60+ columns).

`Emulator.add_bulk_object(records, columns)` registers ``Wide_Thing__c`` (``custom_objects.wide_object``: a
custom object's standard fields plus custom fields of every usual type up to ``columns``) and serves it through
describe and Bulk API 2.0 query jobs only (``SELECT <fields> FROM Wide_Thing__c``, no WHERE, ORDER BY or LIMIT;
REST and CDC know nothing of its records). Record ``i`` is a pure function of ``i``: a result page is computed
from its row range when it is asked for, in constant memory, with Arrow's vectorised kernels (values taken from a
seeded pool per field, every few values null, an Id per row) and written by Arrow's CSV writer in the Bulk API's
shape: every value quoted, quotes doubled, line breaks kept inside values, null as an empty unquoted cell.
"""

from __future__ import annotations

import io
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from salesforce_emulator import ids
from salesforce_emulator.custom_objects import field_value
from salesforce_emulator.schema import Field, SObject
from salesforce_emulator.values import to_csv

POOL = 4099  # distinct values per field (a prime: columns do not repeat in step)
_BASE62 = np.frombuffer(ids.BASE62.encode(), dtype=np.uint8)
_SUFFIX = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ012345", dtype=np.uint8)
MODSTAMP = "2025-06-30T12:00:00.000Z"


def record_ids(key_prefix: str, first: int, count: int) -> pa.Array:
    """Ids of records `first` .. `first + count - 1` (sequence numbers from 1), as `ids.make_id` makes them."""
    n = np.arange(first + 1, first + count + 1, dtype=np.int64)
    chars = np.empty((count, 18), dtype=np.uint8)
    chars[:, :3] = np.frombuffer(key_prefix.encode(), dtype=np.uint8)
    for pos in range(14, 2, -1):
        chars[:, pos] = _BASE62[n % 62]
        n //= 62
    upper = (chars[:, :15] >= ord("A")) & (chars[:, :15] <= ord("Z"))
    weights = 1 << np.arange(5)
    for chunk in range(3):
        chars[:, 15 + chunk] = _SUFFIX[(upper[:, chunk * 5 : chunk * 5 + 5] * weights).sum(axis=1)]
    offsets = np.arange(0, 18 * (count + 1), 18, dtype=np.int32)
    return pa.StringArray.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


class BulkObject:
    """Record `i` of `obj` (0 <= i < `records`) as Bulk CSV text, for any row range."""

    def __init__(self, obj: SObject, records: int, seed: int = 7, deleted_every: int = 1000):
        self.obj, self.records, self.deleted_every = obj, records, deleted_every
        rng = random.Random(seed)
        own_ids = record_ids(obj.key_prefix, 0, min(records, POOL)).to_pylist()
        targets = {obj.name: own_ids, "Account": [ids.make_id("001", k) for k in range(1, POOL + 1)]}
        self.pools: dict[str, pa.Array] = {}
        for fld in obj.fields:
            if fld.name in ("Id", "IsDeleted", "SystemModstamp") or fld.parent:
                continue
            if fld.name in ("OwnerId", "CreatedById", "LastModifiedById"):
                values = [ids.make_id("005", 1)]
            elif fld.type == "datetime" and not fld.name.endswith("__c"):
                values = [MODSTAMP]
            elif fld.name == "Name":
                values = [f"{obj.name[:-3]} {k}" for k in range(POOL)]
            else:
                values = [to_csv(fld.type, field_value(rng, fld, targets)) for _ in range(POOL)]
            self.pools[fld.name] = pa.array(values, pa.string())

    def page(self, start: int, end: int, fields: list[Field], delimiter: str, line_ending: str) -> bytes:
        """CSV lines (no header) of records `start` .. `end - 1`, the columns `fields` in that order."""
        count = end - start
        if count <= 0:
            return b""
        index = np.arange(start, end, dtype=np.int64)
        columns = []
        for number, fld in enumerate(fields):
            if fld.name == "Id":
                columns.append(record_ids(self.obj.key_prefix, start, count))
            elif fld.name == "IsDeleted":
                columns.append(
                    pc.if_else(pa.array(index % self.deleted_every == self.deleted_every - 1), "true", "false")
                )
            elif fld.name == "SystemModstamp":
                columns.append(pa.repeat(pa.scalar(MODSTAMP), count))
            else:
                pool = self.pools[fld.name]
                column = pool.take(pa.array((index * (2 * number + 3) + number) % len(pool)))
                if fld.nillable and fld.name.endswith("__c"):
                    column = pc.if_else(pa.array((index + number) % 9 == 0), pa.scalar(None, pa.string()), column)
                columns.append(column)
        table = pa.Table.from_arrays(columns, names=[f"c{k}" for k in range(len(fields))])
        out = io.BytesIO()
        pa_csv.write_csv(
            table,
            out,
            pa_csv.WriteOptions(
                include_header=False, delimiter=delimiter, quoting_style="all_valid", eol=line_ending.encode()
            ),
        )
        return out.getvalue()
