"""OAuth 2.0 and identity: ``/services/oauth2/token`` (the login flows integrations use) and
``/services/oauth2/userinfo`` (who the session is, and the org id the Pub/Sub API wants as ``tenantid``).

The emulator has one connected app (client id and secret, an optional certificate for the JWT bearer flow) and one
integration user. The flows, as Salesforce Help describes them ("OAuth 2.0 Client Credentials Flow for
Server-to-Server Integration", "OAuth 2.0 JWT Bearer Flow for Server-to-Server Integration"):

- ``grant_type=client_credentials``: the client id and secret, in the form or as HTTP Basic auth (simple-salesforce
  sends the latter); the session runs as the app's execution user.
- ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer``: ``assertion`` is a JWT signed RS256 with the private
  key of the certificate uploaded to the connected app; ``iss`` is the client id, ``sub`` the username, ``aud`` the
  authorization server (``https://login.salesforce.com``, ``https://test.salesforce.com``, or this org's URL),
  ``exp`` not passed. No refresh token comes back: a client signs a new assertion when the session expires.
- ``grant_type=password``: the legacy username-password flow.

Failures answer HTTP 400 with ``{"error", "error_description"}`` as Salesforce does (``invalid_client_id``,
``invalid_client``, ``invalid_grant``, ``unsupported_grant_type``).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import jwt
from cryptography import x509

from salesforce_emulator.server import Request, Response, route

if TYPE_CHECKING:
    from salesforce_emulator.api import Api

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
LOGIN_AUDIENCES = ("https://login.salesforce.com", "https://test.salesforce.com")


def _form(req: Request) -> dict[str, str]:
    form = {k: v[0] for k, v in parse_qs(req.body.decode() or "").items()}
    form.update({k: v[0] for k, v in req.query.items()})
    scheme, _, encoded = req.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "basic":  # client id and secret as HTTP Basic auth
        try:
            client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return form
        form.setdefault("client_id", client_id)
        form.setdefault("client_secret", secret)
    return form


def _error(error: str, description: str) -> Response:
    return Response(400, {"error": error, "error_description": description})


def _jwt_error(api: Api, assertion: str) -> Response | None:
    """Why the JWT bearer assertion is refused, or None when it is good."""
    creds = api.credentials
    try:
        claims = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.InvalidTokenError:
        return _error("invalid_grant", "invalid assertion")
    if claims.get("iss") != creds["client_id"]:
        return _error("invalid_client_id", "client identifier invalid")
    certificate = creds.get("jwt_certificate")
    if not certificate:
        return _error("invalid_client", "the connected app has no certificate for the JWT bearer flow")
    public_key = x509.load_pem_x509_certificate(certificate.encode()).public_key()
    try:
        jwt.decode(
            assertion,
            public_key,
            algorithms=["RS256"],
            audience=[*LOGIN_AUDIENCES, api.instance_url],
            options={"require": ["exp", "iss", "sub", "aud"]},
        )
    except jwt.ExpiredSignatureError:
        return _error("invalid_grant", "expired assertion: exp has passed (sign a new one)")
    except jwt.InvalidAudienceError:
        return _error("invalid_grant", "audience is invalid")
    except jwt.InvalidTokenError:
        return _error("invalid_grant", "invalid assertion")
    if claims.get("sub") != creds["username"]:
        return _error("invalid_grant", "user hasn't approved this consumer")
    return None


def oauth_token(api: Api, req: Request) -> Response:
    form = _form(req)
    creds = api.credentials
    grant = form.get("grant_type")
    client_ok = form.get("client_id") == creds["client_id"] and form.get("client_secret") == creds["client_secret"]
    if grant == JWT_BEARER:
        refused = _jwt_error(api, form.get("assertion", ""))
        if refused is not None:
            return refused
    elif grant == "client_credentials":
        if not client_ok:
            return _error("invalid_client", "invalid client credentials")
    elif grant == "password":
        if (
            not client_ok
            or form.get("username") != creds["username"]
            or form.get("password") not in (creds["password"], creds["password"] + creds.get("security_token", ""))
        ):
            return _error("invalid_grant", "authentication failure")
    else:
        return _error("unsupported_grant_type", f"grant type not supported: {grant!r}")
    body: dict[str, Any] = {
        "access_token": api.token,
        "instance_url": api.instance_url,
        "token_type": "Bearer",
        "id": f"{api.instance_url}/id/{api.org_id}/{api.store.default_user_id}",
        "scope": "api",
        "issued_at": str(int(time.time() * 1000)),
    }
    if grant != JWT_BEARER:
        body["signature"] = "emulator"
    return Response(body=body)


def userinfo(api: Api, req: Request) -> Response:
    user_id = req.user_id or api.store.default_user_id
    return Response(
        body={
            "sub": f"{api.instance_url}/id/{api.org_id}/{user_id}",
            "user_id": user_id,
            "organization_id": api.org_id,
            "preferred_username": api.credentials["username"],
            "name": "Integration User",
            "active": True,
            "user_type": "STANDARD",
            "urls": {"rest": f"{api.instance_url}/services/data/v{{version}}/"},
        }
    )


ROUTES = [
    route("POST", "/services/oauth2/token", "oauth_token", oauth_token, auth=False, data=False),
    route("GET", "/services/oauth2/userinfo", "userinfo", userinfo, data=False),
]
