"""Whether a host is this machine's loopback: the one place a connection without TLS (a Salesforce URL, a Spark
Connect port) reaches nothing but this machine."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str | None) -> bool:
    """`host` (a name or an address, as `urlsplit(...).hostname` gives it) is `localhost` or a loopback address."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1, as a dual-stack socket shows IPv4 loopback
    return address.is_loopback or bool(mapped and mapped.is_loopback)
