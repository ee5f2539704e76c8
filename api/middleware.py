from django.conf import settings

from api.errors import error_response
from core import limits


class BodySizeLimitMiddleware:
    """Refuse bodies over the contract's 2 MiB before anything reads them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0:
            return error_response(
                400,
                "validation_error",
                "The Content-Length header is not a valid length.",
                {"Content-Length": ["Must be a whole number of bytes."]},
            )
        if length > settings.MAX_REQUEST_BODY_BYTES:
            return error_response(413, "payload_too_large", limits.TOO_LARGE_MESSAGE, limits.TOO_LARGE_DETAILS)
        return self.get_response(request)
