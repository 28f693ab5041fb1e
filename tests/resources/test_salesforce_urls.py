"""A Salesforce URL that is not https is refused before any credential is sent (loopback excepted: the emulator).

The OAuth form carries the client secret, the password or the signed JWT, and every later call the session token:
over `http://` to another host they would cross the network in clear. `check_urls` is applied where the resource
connects (every flow, the subscriber's too) and by `python -m demo --org` before anything starts
(tests/demo/test_real_org.py).
"""

from __future__ import annotations

import pytest

from resources.salesforce import InsecureUrlError, SalesforceResource, check_urls


@pytest.mark.parametrize(
    ("field", "url", "variable"),
    [
        ("instance_url", "http://acme.my.salesforce.com", "SF_INSTANCE_URL"),
        ("login_url", "http://login.salesforce.com", "SF_LOGIN_URL"),
        ("instance_url", "ftp://acme.my.salesforce.com", "SF_INSTANCE_URL"),
        ("instance_url", "acme.my.salesforce.com", "SF_INSTANCE_URL"),
    ],
)
def test_a_url_that_is_not_https_is_refused_naming_its_variable(field, url, variable):
    with pytest.raises(InsecureUrlError, match=f"{variable} .* is not an https URL"):
        check_urls({field: url})


@pytest.mark.parametrize(
    "url",
    ["https://acme.my.salesforce.com", "http://127.0.0.1:8443", "http://localhost:8443", "http://[::1]:8443", None],
)
def test_https_and_loopback_urls_pass(url):
    check_urls({"instance_url": url, "login_url": url})


def test_the_resource_refuses_before_sending_the_secret():
    # The host does not exist: a request would fail with a connection error, not this one.
    resource = SalesforceResource(instance_url="http://acme.invalid", client_id="app", client_secret="s3cr3t")
    with pytest.raises(InsecureUrlError, match="SF_INSTANCE_URL"):
        resource.client()
