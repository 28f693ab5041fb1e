"""Quoting for Spark SQL expression strings, and running a query over DataFrames.

Per-column expressions are built as SQL text and parsed once by Spark: with hundreds of columns (wide objects),
composing them through the Column API costs thousands of Python-to-JVM calls per run.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession


def quote(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def literal(value: str) -> str:
    """A string literal for Spark SQL."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def in_list(values: tuple[str, ...] | list[str]) -> str:
    """A parenthesised list of string literals, for `x IN (...)`."""
    return "(" + ", ".join(literal(v) for v in values) + ")"


def run_sql(spark: SparkSession, query: str, **frames: DataFrame) -> DataFrame:
    """Run `query`, binding each `{name}` placeholder to the DataFrame given as `name` (other braces, such as
    regex quantifiers, are literal text)."""
    escaped = query.replace("{", "{{").replace("}", "}}")
    for name in frames:
        escaped = escaped.replace("{{" + name + "}}", "{" + name + "}")
    return spark.sql(escaped, args=None, **frames)
