import json

from django.conf import settings
from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsFromFile(OAuth2Validator):
    """Each person's claims from claims.json in the state directory, read at every token and
    userinfo request: a test changes someone's groups by rewriting the file."""

    oidc_claim_scope = None  # every claim, whatever the scopes

    def get_additional_claims(self, request):
        claims = json.loads((settings.STATE / "claims.json").read_text())
        return claims.get(request.user.username, {})
