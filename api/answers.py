"""What a per-turn endpoint answers, as bytes, the same for both HTTP lanes.

An entry of the route table (api/routes.py) returns an Answer; the fast lane sends it as it
is, the Django lane wraps it in an HttpResponse (django_response), and the middleware or the
fast lane's edge headers are added around it. The body is rendered once, here, so the two
lanes cannot render it differently."""

from dataclasses import dataclass

from django.http import HttpResponse
from rest_framework.renderers import JSONRenderer

from api.errors import error_response, exception_handler
from api.views.sessions import session_out
from metrics import usage
from sessions_app.models import Session
from sessions_app.selectors import pinned_body
from sessions_app.turns import pinned_content

JSON = (b"content-type", b"application/json")


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def etag_matches(header: str | None, content_hash: str) -> bool:
    """If-None-Match against a content hash (weak tags compare equal, `*` matches): the one
    reading of the header, for the pinned bundle and GET .../versions/{n}/ alike."""
    if not header:
        return False
    tags = {tag.strip().removeprefix("W/") for tag in header.split(",")}
    return "*" in tags or f'"{content_hash}"' in tags


def entity_tags(header: str | None) -> list[str] | None:
    """If-Match's tags without their quotes (weak ones as strong: If-Match names the state the
    writer read), `*` kept as it is; None without the header. A tag that is not quoted stays as
    sent and so matches nothing we issued."""
    if header is None:
        return None
    tags = [tag.strip().removeprefix("W/") for tag in header.split(",") if tag.strip()]
    return [tag[1:-1] if len(tag) >= 2 and tag[0] == tag[-1] == '"' else tag for tag in tags]


def content_unless_held(version_id: int, content_hash: str, if_none_match: str | None) -> bytes | None:
    """The version's bytes, or None when If-None-Match says the client holds them."""
    held = etag_matches(if_none_match, content_hash)
    return pinned_content(version_id=version_id, content_hash=content_hash, held=held)


def pinned_answer(
    *, bundle_name: str, version_id: int, content_hash: str, number: int, content: bytes | None
) -> Answer:
    """200 with the envelope around `content`, or 304 when it is None (the client holds it).
    Counted as a fetch here: only once the bytes are in hand."""
    etag = [(b"etag", f'"{content_hash}"'.encode())]
    usage.fetch_recorded(version_id)
    if content is None:
        # Django's HttpResponse(status=304) carries its default content type; so does this.
        return Answer(304, [(b"content-type", b"text/html; charset=utf-8"), *etag], b"")
    body = pinned_body(bundle_name=bundle_name, content_hash=content_hash, number=number, content=content)
    return Answer(200, [JSON, *etag], body)


def bundle_answer(session: Session, if_none_match: str | None) -> Answer:
    """The pinned-bundle answer for a checked session: 304 when the client holds these bytes."""
    version = session.version
    return pinned_answer(
        bundle_name=session.bundle.name,
        version_id=version.pk,
        content_hash=version.content_hash,
        number=version.number,
        content=content_unless_held(version.pk, version.content_hash, if_none_match),
    )


def session_answer(session: Session, status: int = 200) -> Answer:
    """The session as SessionOut (start, heartbeat, end), rendered as DRF renders it."""
    return Answer(status, [JSON], JSONRenderer().render(session_out(session)))


def error_answer(exc: Exception) -> Answer:
    """An error as api.errors.exception_handler answers it, in the contract's shape."""
    response = exception_handler(exc, {})
    assert response is not None
    return Answer(
        response.status_code,
        [(k.lower().encode("latin1"), v.encode("latin1")) for k, v in response.items()],
        response.content,
    )


def bug_answer() -> Answer:
    """500 in the contract's shape, for a call whose write committed but could not be answered."""
    response = error_response(500, "internal_error", "The server failed to answer; the request was carried out.")
    return Answer(500, [JSON], response.content)


def django_response(answer: Answer) -> HttpResponse:
    """The Answer as the Django lane returns it (its middleware then adds the edge headers)."""
    headers = {name.decode("latin1"): value.decode("latin1") for name, value in answer.headers}
    response = HttpResponse(answer.body, status=answer.status, content_type=headers.pop("content-type"))
    for name, value in headers.items():
        response[name] = value
    return response
