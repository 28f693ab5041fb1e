"""The Delta protocol every table of the platform keeps: one that DuckDB, polars, Spark with Delta and Trino can read
and delta-rs can write.

A table's protocol (`minReaderVersion`, `minWriterVersion`, `readerFeatures`, `writerFeatures`) names what a client
must implement to read it or to write it; a client that lacks one of them refuses the table. The platform creates
its tables with the lowest protocol delta-rs gives them (reader 1; writer 2, or 4 with a Change Data Feed), but
anyone with write access can raise it: Spark's `ALTER TABLE ... SET TBLPROPERTIES`, a Databricks workspace that
turns deletion vectors on by default, delta-rs' `alter.add_feature`. A protocol is never lowered again without
rewriting the table, and the platform would learn of it only when a write failed halfway through a run (delta-rs:
"Unsupported table features required") or, worse, when a reader read it wrong. So every write checks the protocol of
the snapshot it commits against first (`ensure_supported`) and refuses, saying what to do, and the asset check
`table_protocol` (cdc_assets/table_protocol.py) reports it on every table.

**The allow-list** (docs/guides/reading-replicas.md, "Table protocol"):
- reader version 1 and no reader features. Every reader below reads version 1. A reader feature changes what the
  files mean: `deletionVectors` (rows deleted without rewriting their file) and `columnMapping` (physical column
  names) are not applied by the platform's own read path (Parquet files through pyarrow, resources/delta.py), and
  polars refuses `columnMapping`; `timestampNtz`, `v2Checkpoint`, `typeWidening`, `variantType` are not in
  delta-rs' or polars' reader sets, or only in recent releases.
- writer versions 2 to 4 (the legacy versions: append-only, invariants, CHECK constraints, Change Data Feed,
  generated columns), or 7 with writer features among those five. Writer features bind writers only, so readers
  are unaffected; these are the ones delta-rs writes (its protocol checker), and Spark, Trino and DuckDB's blind
  inserts write them as well. Outside them: `rowTracking`, `domainMetadata`, `identityColumns`,
  `icebergCompatV1/V2`, `clustering`, `inCommitTimestamp`, `typeWidening`, ... (delta-rs 1.6 refuses to commit to
  a table with `rowTracking`, `domainMetadata`, `identityColumns` or `icebergCompatV1`).
- and `delta.appendOnly` not true: the platform's merges and overwrites remove files, which an append-only table
  refuses.

Sources: delta-rs' protocol support table (https://delta-io.github.io/delta-rs/feature-table/) and its protocol
checker (crates/core/src/kernel/transaction/protocol.rs); polars' Delta scanner
(py-polars polars/io/delta/_dataset.py: reader version 2 refused, reader features deletionVectors, timestampNtz,
variantType); DuckDB's delta extension (https://github.com/duckdb/duckdb-delta, on delta-kernel-rs: deletion
vectors read); Trino's Delta Lake connector (https://trino.io/docs/current/connector/delta-lake.html, and its
DeltaLakeTableFeatures: reader columnMapping, deletionVectors, timestampNtz, typeWidening, v2Checkpoint,
vacuumProtocolCheck, variantType); Spark with Delta reads every feature of its release.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltalake import DeltaTable

READER_VERSION = 1
LEGACY_WRITER_VERSIONS = frozenset({2, 3, 4})
TABLE_FEATURES_WRITER_VERSION = 7
WRITER_FEATURES = frozenset({"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"})
READER_FEATURES: frozenset[str] = frozenset()
APPEND_ONLY = "delta.appendOnly"


@dataclass(frozen=True)
class Protocol:
    """A table's protocol as the allow-list reads it (and as the check's metadata shows it)."""

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...]
    writer_features: tuple[str, ...]
    append_only: bool

    @classmethod
    def of(cls, table: DeltaTable) -> Protocol:
        protocol = table.protocol()
        return cls(
            protocol.min_reader_version,
            protocol.min_writer_version,
            tuple(sorted(protocol.reader_features or ())),
            tuple(sorted(protocol.writer_features or ())),
            table.metadata().configuration.get(APPEND_ONLY, "false").lower() == "true",
        )

    def problems(self) -> list[str]:
        """What puts this protocol outside the allow-list ([]: inside it)."""
        return self.reader_problems() + self.writer_problems()

    def reader_problems(self) -> list[str]:
        """What a reader must apply beyond the allow-list (the platform's own Parquet reads included)."""
        out = []
        if unknown := sorted(set(self.reader_features) - READER_FEATURES):
            out.append(f"reader features {', '.join(unknown)}")
        if self.min_reader_version > READER_VERSION and not unknown:
            out.append(f"minReaderVersion {self.min_reader_version}")
        return out

    def writer_problems(self) -> list[str]:
        """What a writer must implement beyond the allow-list (reader features aside)."""
        out = []
        if self.min_writer_version == TABLE_FEATURES_WRITER_VERSION:
            if unknown := sorted(set(self.writer_features) - WRITER_FEATURES - set(self.reader_features)):
                out.append(f"writer features {', '.join(unknown)}")
        elif self.min_writer_version > max(LEGACY_WRITER_VERSIONS):
            out.append(
                f"minWriterVersion {self.min_writer_version} "
                + {5: "(column mapping)", 6: "(identity columns)"}.get(self.min_writer_version, "")
            )
        if self.append_only:
            out.append(f"{APPEND_ONLY}=true")
        return out

    def describe(self) -> str:
        features = [*self.reader_features, *(f for f in self.writer_features if f not in self.reader_features)]
        return f"minReaderVersion {self.min_reader_version}, minWriterVersion {self.min_writer_version}" + (
            f", features {', '.join(features)}" if features else ""
        )


class UnsupportedProtocol(RuntimeError):
    """A table's protocol left the allow-list: the platform does not write it (module docstring)."""


def unsupported_message(name: str, protocol: Protocol, problems: list[str]) -> str:
    """What is wrong with table `name`'s protocol and what to do, for the refusal and the check alike."""
    return (
        f"Delta table {name} now requires {'; '.join(problems)} ({protocol.describe()}): outside the protocol every "
        f"reader of the replicas (DuckDB, polars, Spark, Trino) can read and delta-rs can write, so the platform "
        f"stops writing it{' and reading its files' if protocol.reader_problems() else ''}. Someone else changed it (a table property, ALTER TABLE, a workspace default). Turn "
        f"off what set it, then bring the table back inside: drop the feature with Spark where Delta can "
        f"(ALTER TABLE delta.`<table path>` DROP FEATURE <feature>; {APPEND_ONLY}: set it to false), or move the "
        f"table aside and let the platform make it again (runbook, check table_protocol)."
    )


def ensure_readable(table: DeltaTable, name: str) -> None:
    """Refuse (`UnsupportedProtocol`) to read a table's Parquet files directly when its protocol asks readers for
    more (deletion vectors, column mapping, ...): those files alone are not its rows."""
    protocol = Protocol.of(table)
    if problems := protocol.reader_problems():
        raise UnsupportedProtocol(unsupported_message(name, protocol, problems))


def ensure_supported(table: DeltaTable, name: str) -> None:
    """Refuse (`UnsupportedProtocol`) a table whose protocol left the allow-list, before the platform writes it."""
    protocol = Protocol.of(table)
    if problems := protocol.problems():
        raise UnsupportedProtocol(unsupported_message(name, protocol, problems))
