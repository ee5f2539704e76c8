"""`Authorization: Bearer <api key>`: the one parser of the header, for every entry point that
takes a key (the DRF authentication class, the fast lane, /mcp)."""

from access.services import api_key_lookup

MALFORMED = "Send the key as 'Authorization: Bearer <api key>'."
NOT_VALID = "The API key is not valid."


class BearerError(Exception):
    """The header says Bearer but carries no usable key. `unusable_key`: a key was sent but it
    cannot be one (not ASCII), which counts as a key that is not valid; otherwise the header's
    shape is wrong (no key, or more than one word after the scheme)."""

    def __init__(self, message: str, *, unusable_key: bool) -> None:
        super().__init__(message)
        self.message = message
        self.unusable_key = unusable_key


def bearer_secret(header: bytes) -> str | None:
    """The secret of an Authorization header's value; None when there is none or the scheme is
    not Bearer (the caller is anonymous). Raises BearerError for a Bearer header without a
    usable key."""
    parts = header.split()
    if not parts or parts[0].lower() != b"bearer":
        return None
    if len(parts) != 2:
        raise BearerError(MALFORMED, unusable_key=False)
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError:
        raise BearerError(NOT_VALID, unusable_key=True) from None


def bearer_lookup(header: bytes) -> tuple[str, str] | None:
    """access.services.api_key_lookup of the header's Bearer key (prefix, SHA-256), or None
    when it carries nothing that could be a key (an ASGI lane then lets Django answer: 401)."""
    try:
        secret = bearer_secret(header)
    except BearerError:
        return None
    return api_key_lookup(secret) if secret is not None else None
