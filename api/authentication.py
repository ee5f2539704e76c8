from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from access.services import api_key_authenticate


class ApiKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer <api key>`. request.auth becomes the key's Actor."""

    def authenticate(self, request):
        header = get_authorization_header(request).split()
        if not header or header[0].lower() != b"bearer":
            return None
        if len(header) != 2:
            raise AuthenticationFailed("Send the key as 'Authorization: Bearer <api key>'.")
        try:
            secret = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("The API key is not valid.") from None
        actor = api_key_authenticate(secret=secret)
        if actor is None:
            raise AuthenticationFailed("The API key is not valid: it is unknown, expired or revoked.")
        return (None, actor)

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) when no key was sent.
        return 'Bearer realm="api"'


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer"}
