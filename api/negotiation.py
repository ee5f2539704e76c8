from rest_framework.negotiation import DefaultContentNegotiation


class JsonAlways(DefaultContentNegotiation):
    """The API speaks JSON only, so it answers JSON whatever `Accept` says.

    A browser's `Accept: text/html` (or any other type) used to get 406 `not_acceptable`, a code
    outside the contract; HTTP lets a server disregard `Accept` (RFC 9110, 12.5.1), and a JSON
    answer is more useful to a person or a client than a refusal. Request bodies are still
    negotiated: a non-JSON body is 415 `unsupported_media_type`. Views that offer several
    renderers (the OpenAPI document, as YAML or JSON) still negotiate as DRF does."""

    def select_renderer(self, request, renderers, format_suffix=None):
        if len(renderers) > 1:
            return super().select_renderer(request, renderers, format_suffix)
        return renderers[0], renderers[0].media_type
