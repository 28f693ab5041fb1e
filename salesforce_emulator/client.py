"""Client-side helpers for talking to the emulator (tests, the workload, the CLI).

``requests`` lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` from the environment silently replace a session's
``verify`` setting; :class:`CaPinnedSession` keeps the CA file it was given, so the emulator's private CA is used
even on machines that set those variables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import requests

if TYPE_CHECKING:
    from simple_salesforce import Salesforce

    from salesforce_emulator.emulator import Emulator


class CaPinnedSession(requests.Session):
    def __init__(self, ca_file: str | bool):
        super().__init__()
        self.verify = ca_file

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> Any:
        settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
        settings["verify"] = self.verify if verify is None or verify is True else verify
        return settings


def simple_salesforce_client(emu: Emulator, token: str | None = None) -> Salesforce:
    from simple_salesforce import Salesforce

    return Salesforce(
        instance_url=emu.instance_url,
        session_id=token or emu.token,
        session=CaPinnedSession(emu.ca_file),
        version=emu.api_version,
    )
