"""Quoting for Spark SQL expression strings.

Per-column expressions are built as SQL text and parsed once by Spark: with hundreds of columns (wide objects),
composing them through the Column API costs thousands of Python-to-JVM calls per run.
"""


def quote(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def literal(value: str) -> str:
    """A string literal for Spark SQL."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
