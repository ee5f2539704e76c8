"""Start the test OpenID provider: `python -m tests.oidc_provider.serve PORT` with IDP_STATE_DIR
(holding claims.json and clients.json) and IDP_ISSUER set. Generates its RSA signing key,
migrates its SQLite database, creates one account per entry of claims.json (password
"idp-password") and the clients of clients.json, then serves on 127.0.0.1:PORT."""

import json
import os
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def main(port: str) -> None:
    state = Path(os.environ["IDP_STATE_DIR"])
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (state / "rsa.pem").write_bytes(pem)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for username in json.loads((state / "claims.json").read_text()):
        User.objects.create_user(username=username, password="idp-password")
    for client in json.loads((state / "clients.json").read_text()):
        Application.objects.create(
            name=client["client_id"],
            client_id=client["client_id"],
            client_secret=client["client_secret"],
            client_type=Application.CLIENT_CONFIDENTIAL,
            authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
            redirect_uris=client["redirect_uri"],
            post_logout_redirect_uris=client["post_logout_redirect_uri"],
            algorithm=Application.RS256_ALGORITHM,
            skip_authorization=True,
        )
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, skip_checks=True)


if __name__ == "__main__":
    main(sys.argv[1])
