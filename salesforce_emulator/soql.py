"""The SOQL subset the emulator understands, compiled to parameterised SQLite.

Supported: ``SELECT f1, f2 | COUNT() FROM Object [WHERE ...] [ORDER BY f [ASC|DESC] [NULLS FIRST|LAST], ...]
[LIMIT n] [OFFSET n]``. WHERE takes comparisons (``= != <> < <= > >=``), ``LIKE``, ``[NOT] IN (...)``, ``AND``,
``OR``, ``NOT`` and parentheses. Literals are typed like Salesforce's: datetime fields need an unquoted datetime
(``2025-11-22T08:26:40Z``), date fields an unquoted date, text fields a quoted string. Text comparisons are
case-insensitive except on ids. Anything else is a ``MALFORMED_QUERY`` or ``INVALID_FIELD`` error, never a
silent misreading.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from salesforce_emulator import ids
from salesforce_emulator.errors import ApiError, invalid_field, malformed_query
from salesforce_emulator.schema import Field, SObject, get_object
from salesforce_emulator.values import FLOAT_TYPES, InvalidFieldValue, canonical_datetime

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'(?:[^'\\]|\\.)*')
    | (?P<datetime>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}))
    | (?P<date>\d{4}-\d{2}-\d{2})
    | (?P<number>-?\d+(?:\.\d+)?)
    | (?P<op><=|>=|!=|<>|=|<|>)
    | (?P<punct>[(),])
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)
_ID_TYPES = {"id", "reference"}
_KEYWORDS = {
    "select",
    "from",
    "where",
    "order",
    "by",
    "limit",
    "offset",
    "and",
    "or",
    "not",
    "in",
    "like",
    "asc",
    "desc",
    "nulls",
    "first",
    "last",
    "null",
    "true",
    "false",
}


@dataclass
class Query:
    obj: SObject
    fields: list[Field]
    count_only: bool = False
    where_sql: str = ""
    params: list[Any] = field(default_factory=list)
    order_sql: str = "Id"
    limit: int | None = None
    offset: int = 0

    def sql(self, include_deleted: bool) -> tuple[str, list[Any]]:
        # An object without IsDeleted has no recycle bin: queryAll does not return its deleted records either.
        clauses = [] if include_deleted and self.obj.recycle_bin else ["IsDeleted = 0"]
        if self.where_sql:
            clauses.append(f"({self.where_sql})")
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        tail = f" ORDER BY {self.order_sql}"
        if self.limit is not None or self.offset:
            tail += f" LIMIT {self.limit if self.limit is not None else -1} OFFSET {self.offset}"
        return f'SELECT * FROM "{self.obj.name}"{where}{tail}', list(self.params)


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise malformed_query(f"unexpected token near '{text[pos : pos + 20]}'")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        pos = match.end()
    return tokens


class _Parser:
    def __init__(self, text: str, find: Callable[[str], SObject | None]):
        self.find = find
        self.tokens = tokenize(text)
        self.pos = 0
        self.params: list[Any] = []
        self.obj: SObject | None = None

    def peek(self, offset: int = 0) -> tuple[str, str]:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else ("eof", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.pos += 1
        return token

    def keyword(self, *words: str) -> bool:
        kind, value = self.peek()
        if kind == "word" and value.lower() in words:
            self.pos += 1
            return True
        return False

    def expect(self, word: str) -> None:
        if not self.keyword(word):
            raise malformed_query(f"expected {word.upper()} but found '{self.peek()[1] or 'end of query'}'")

    def resolve(self, name: str) -> Field:
        assert self.obj is not None
        if "." in name:
            raise invalid_field(
                f"Didn't understand relationship '{name.split('.')[0]}' in field path "
                "(relationship queries are not supported by the emulator)",
                [name],
            )
        fld = self.obj.field(name)
        if fld is None:
            raise invalid_field(
                f"No such column '{name}' on entity '{self.obj.name}'. If you are attempting to "
                "use a custom field, be sure to append the '__c' after the custom field name.",
                [name],
            )
        return fld

    # -- grammar ----------------------------------------------------------------------------------
    def parse(self) -> Query:
        self.expect("select")
        names, count_only = self.select_list()
        self.expect("from")
        kind, obj_name = self.take()
        obj = self.find(obj_name) if kind == "word" else None
        if obj is None:
            raise ApiError(400, "INVALID_TYPE", f"sObject type '{obj_name}' is not supported.")
        self.obj = obj
        fields, seen = [], set()
        for name in names:
            fld = self.resolve(name)
            if fld.name in seen:
                raise malformed_query(f"duplicate field selected: {fld.name}")
            seen.add(fld.name)
            fields.append(fld)
        query = Query(obj, fields, count_only)
        if self.keyword("where"):
            query.where_sql = self.disjunction()
            query.params = self.params
        if self.keyword("order"):
            self.expect("by")
            query.order_sql = self.order_list()
        if self.keyword("limit"):
            query.limit = self.integer("LIMIT")
        if self.keyword("offset"):
            query.offset = self.integer("OFFSET")
        if self.peek()[0] != "eof":
            raise malformed_query(f"unexpected token: '{self.peek()[1]}'")
        return query

    def select_list(self) -> tuple[list[str], bool]:
        kind, value = self.peek()
        if kind == "word" and value.lower() == "count" and self.peek(1) == ("punct", "("):
            self.pos += 2
            if self.take() != ("punct", ")"):
                raise malformed_query("only COUNT() is supported")
            return [], True
        names = []
        while True:
            kind, value = self.take()
            if kind != "word" or value.lower() in _KEYWORDS:
                raise malformed_query(f"expected a field name but found '{value}'")
            names.append(value)
            if self.peek() != ("punct", ","):
                return names, False
            self.pos += 1

    def integer(self, what: str) -> int:
        kind, value = self.take()
        if kind != "number" or not value.isdigit():
            raise malformed_query(f"{what} needs a non-negative integer")
        return int(value)

    def disjunction(self) -> str:
        parts = [self.conjunction()]
        while self.keyword("or"):
            parts.append(self.conjunction())
        return " OR ".join(parts) if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def conjunction(self) -> str:
        parts = [self.negation()]
        while self.keyword("and"):
            parts.append(self.negation())
        return " AND ".join(parts) if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    def negation(self) -> str:
        if self.keyword("not"):
            return f"NOT ({self.negation()})"
        if self.peek() == ("punct", "("):
            self.pos += 1
            inner = self.disjunction()
            if self.take() != ("punct", ")"):
                raise malformed_query("missing closing parenthesis")
            return f"({inner})"
        return self.comparison()

    def comparison(self) -> str:
        kind, name = self.take()
        if kind != "word":
            raise malformed_query(f"expected a field name but found '{name}'")
        fld = self.resolve(name)
        column = column_sql(fld)
        collate = "" if fld.type in _ID_TYPES or fld.type not in _TEXT else " COLLATE NOCASE"
        negate = self.keyword("not")
        if self.keyword("in"):
            values = self.value_list(fld)
            marks = ", ".join("?" * len(values))
            self.params.extend(values)
            return f"{column}{collate} {'NOT IN' if negate else 'IN'} ({marks})"
        if negate:
            raise malformed_query("NOT must be followed by IN here")
        if self.keyword("like"):
            self.params.append(self.literal(fld, like=True))
            return f"{column} LIKE ? ESCAPE '\\'"
        kind, op = self.take()
        if kind != "op":
            raise malformed_query(f"expected an operator after {fld.name}")
        value = self.literal(fld)
        op = "!=" if op == "<>" else op
        if value is None:
            if op not in ("=", "!="):
                raise malformed_query(f"null can only be compared with = or !=, not {op}")
            return f"{column} IS {'NOT ' if op == '!=' else ''}NULL"
        self.params.append(value)
        if op == "!=":
            return f"({column}{collate} != ? OR {column} IS NULL)"
        return f"{column}{collate} {op} ?"

    def value_list(self, fld: Field) -> list[Any]:
        if self.take() != ("punct", "("):
            raise malformed_query("IN needs a parenthesised list")
        values = [self.literal(fld)]
        while self.peek() == ("punct", ","):
            self.pos += 1
            values.append(self.literal(fld))
        if self.take() != ("punct", ")"):
            raise malformed_query("missing closing parenthesis in IN list")
        return values

    def literal(self, fld: Field, like: bool = False) -> Any:
        kind, raw = self.take()
        if kind == "word" and raw.lower() == "null":
            return None
        wrong = ApiError(
            400,
            "INVALID_QUERY_FILTER_OPERATOR",
            f"value of filter criterion for field '{fld.name}' must be of type {fld.type}",
        )
        try:
            if fld.type == "datetime":
                if kind != "datetime":
                    raise wrong
                return canonical_datetime(raw)
            if fld.type == "date":
                if kind != "date":
                    raise wrong
                return raw
            if fld.type == "boolean":
                if kind != "word" or raw.lower() not in ("true", "false"):
                    raise wrong
                return int(raw.lower() == "true")
            if fld.type == "int" or fld.type in FLOAT_TYPES:
                if kind != "number":
                    raise wrong
                return float(raw) if fld.type in FLOAT_TYPES else int(float(raw))
        except InvalidFieldValue as exc:
            raise wrong from exc
        if kind != "string":
            raise wrong
        text = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), raw[1:-1])
        if like:
            return raw[1:-1]
        if fld.type in _ID_TYPES and len(text) == 15:
            return ids.to_18(text)
        return text

    def order_list(self) -> str:
        parts = []
        while True:
            kind, name = self.take()
            if kind != "word":
                raise malformed_query(f"cannot order by '{name}'")
            fld = self.resolve(name)
            item = column_sql(fld) + (" COLLATE NOCASE" if fld.type in _TEXT and fld.type not in _ID_TYPES else "")
            if self.keyword("desc"):
                item += " DESC"
            else:
                self.keyword("asc")
            if self.keyword("nulls"):
                item += " NULLS FIRST" if self.keyword("first") else (self.expect("last") or " NULLS LAST")
            parts.append(item)
            if self.peek() != ("punct", ","):
                break
            self.pos += 1
        if not any(p.startswith('"Id"') for p in parts):
            parts.append('"Id"')
        return ", ".join(parts)


_TEXT = {"string", "picklist", "textarea", "email", "phone", "url", "combobox", "multipicklist", "id", "reference"}


def column_sql(fld: Field) -> str:
    """The SQL for a field in WHERE / ORDER BY: a column, or the expression a person's Name is built from."""
    if fld.stored:
        return f'"{fld.name}"'
    if fld.parent and fld.type == "string":
        return "TRIM(COALESCE(\"FirstName\", '') || ' ' || COALESCE(\"LastName\", ''))"
    raise invalid_field(f"field '{fld.name}' can not be filtered in a query call", [fld.name])


def parse(soql: str, find: Callable[[str], SObject | None] = get_object) -> Query:
    """Parse a SOQL statement over the objects `find` knows (an org's: ``Store.find``); raises :class:`ApiError`
    (400) with Salesforce's error code when unsupported."""
    if not soql or not soql.strip():
        raise malformed_query("empty query")
    return _Parser(soql, find).parse()
