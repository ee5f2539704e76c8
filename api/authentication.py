"""Who is calling: the API key in `Authorization: Bearer`, as an Actor.

DRF keeps what an authentication class returns in `request.auth`, typed as anything; views
read the caller through `actor_of(request)` instead, which says what it is."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, NotAuthenticated, Throttled
from rest_framework.request import Request

from access.actors import Actor
from access.bearer import BearerError, bearer_secret
from access.ratelimit import auth_failure_wait
from access.services import api_key_authenticate, api_key_lookup
from audit.context import client_ip
from core import observe
from edge.dispatch import KEY_NOT_WORKING


def request_actor(request: Request) -> Actor | None:
    """The Actor of the key that authenticated `request`, or None (no key was sent)."""
    auth = request.auth
    return auth if isinstance(auth, Actor) else None


def actor_of(request: Request) -> Actor:
    """The Actor of the key that authenticated `request`. Every view here runs after
    RolePermission, which refuses a request without one, so this only raises on a view that
    was configured without it."""
    actor = request_actor(request)
    if actor is None:
        raise NotAuthenticated("Send an API key: 'Authorization: Bearer <api key>'.")
    return actor


class ApiKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer <api key>`. request.auth becomes the key's Actor."""

    def authenticate(self, request: Request) -> tuple[None, Actor] | None:
        try:
            secret = bearer_secret(get_authorization_header(request))
        except BearerError as exc:
            raise AuthenticationFailed(exc.message) from None
        if secret is None:
            return None
        lookup = api_key_lookup(secret)
        # The fast lane looked this key up before it declined the request: once is enough.
        known_bad = lookup is not None and request.META.get(KEY_NOT_WORKING) == lookup[1]
        actor = None if known_bad else api_key_authenticate(secret=secret)
        if actor is None:
            wait = auth_failure_wait(client_ip=client_ip(request))
            if wait is not None:
                raise Throttled(wait, detail=f"Too many requests with a key that is not valid; retry in {wait} s.")
            raise AuthenticationFailed("The API key is not valid: it is unknown, expired or revoked.")
        if lookup is not None:  # always, for a working key
            observe.key_used(lookup[0])
        return (None, actor)

    def authenticate_header(self, request: Request) -> str:
        # Makes DRF answer 401 (not 403) when no key was sent.
        return 'Bearer realm="api"'


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer"}
