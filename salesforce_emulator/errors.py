"""Errors in Salesforce's REST shape: ``[{"message": ..., "errorCode": ..., "fields": [...]}]``."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API returns to the client, with the HTTP status and Salesforce error code."""

    def __init__(self, status: int, error_code: str, message: str, fields: list[str] | None = None):
        super().__init__(f"{error_code}: {message}")
        self.status = status
        self.error_code = error_code
        self.message = message
        self.fields = fields

    def body(self) -> list[dict[str, Any]]:
        item: dict[str, Any] = {"message": self.message, "errorCode": self.error_code}
        if self.fields is not None:
            item["fields"] = self.fields
        return [item]


def not_found(what: str = "The requested resource does not exist") -> ApiError:
    return ApiError(404, "NOT_FOUND", what)


def invalid_field(message: str, fields: list[str] | None = None) -> ApiError:
    return ApiError(400, "INVALID_FIELD", message, fields)


def malformed_query(message: str) -> ApiError:
    return ApiError(400, "MALFORMED_QUERY", message)
