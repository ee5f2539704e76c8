""" "Check against vN" on the new-version form: what saving would be told and what moving each
label to the result would meet, computed without publishing by the services the API uses
(registry.lifecycle.version_publish_check, registry.contracts' classification, the label's
compatibility policy as registry.lifecycle.compatibility_check applies it, and the render's
prefix from knowledge.render); and the version page's provider request and the playground's
turns (`compose_turn`, the one function both call), the turn call's body for a new session of
a version or a draft, built by the turn call's own steps (turns.preview)."""

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from access.actors import Actor
from adminui import selectors
from core.errors import InvalidContent
from core.tokens import estimate_tokens
from knowledge.render import prefix_for
from registry import composition
from registry.canonical import canonicalise
from registry.contracts import LEVELS, Change, Diff, by_severity, diff_contents
from registry.lifecycle import contract_check
from registry.models import Bundle, BundleVersion, Compatibility
from registry.parsed_content import content_document
from skills.index_store import routing_index
from skills.services import route_embedder
from turns import providers
from turns.preview import MAX_PREVIEW_MESSAGE, Draft, conversation_request


@dataclass(frozen=True)
class LabelVerdict:
    name: str
    targets: str  # what it targets now: v3, or v3 90% · v4 10%
    level: str  # the change against its targets, the most severe of them
    policy: str  # its compatibility policy (none, backward)
    refused: bool  # a move to the new version would be refused without allow_breaking
    breaking: list[Change] = field(default_factory=list)


@dataclass(frozen=True)
class Verdict:
    against: BundleVersion | None
    errors: dict[str, list[str]]
    warnings: list[dict[str, str]]
    level: str | None  # against `against`; None when the bundle has no version yet
    changes: list[Change]
    labels: list[LabelVerdict]
    prefix_bytes: int
    prefix_tokens: int
    identical: BundleVersion | None  # saving would write no new version: this one has the content
    # For the message tried: the L1 cards always loaded and the L2 cards routed ({name, score, why}).
    resident: list[str] = field(default_factory=list)
    routed: list[dict[str, Any]] = field(default_factory=list)
    tried: str = ""
    routing: str = "full"  # "keywords" while the worker builds a big version's index (skills.index_store)


def _content(version: BundleVersion) -> dict[str, Any]:
    return json.loads(bytes(version.canonical))


def check_against(
    *, bundle: Bundle, content: dict[str, Any], against: BundleVersion | None, actor: Actor, message: str = ""
) -> Verdict:
    """Raises InvalidContent when `content` is not a content document (the form shows it).
    Includes are resolved first, as version_publish does: the hash and the prefix shown are
    those the version would have."""
    doc, _, content_hash = canonicalise(composition.content_resolved(content=content, bundle=bundle, actor=actor))
    latest = selectors.version_latest(bundle)
    check = contract_check(doc, previous=_content(latest) if latest else None)  # what version_publish applies
    diff = by_severity(diff_contents(_content(against), doc)) if against else None
    labels = _label_verdicts(bundle, doc)
    session_values = {
        name: spec["default"]
        for name, spec in (doc.get("variables") or {}).items()
        if isinstance(spec, dict) and "default" in spec
    }
    prefix = prefix_for(
        content_hash=content_hash, content=doc, session_variables=session_values, names=list(doc.get("knowledge", []))
    )
    resident, routed, routing = _route(content_hash, doc, message)
    return Verdict(
        resident=resident,
        routed=routed,
        routing=routing,
        tried=message.strip(),
        against=against,
        errors=check.errors,
        warnings=check.warnings,
        level=diff.level if diff else None,
        changes=diff.changes if diff else [],
        labels=labels,
        prefix_bytes=len(prefix.body),
        prefix_tokens=estimate_tokens(prefix.body.decode()),
        identical=selectors.version_with_hash(bundle, content_hash),
    )


def _label_verdicts(bundle: Bundle, doc: dict[str, Any]) -> list[LabelVerdict]:
    """Per label of the bundle, what its compatibility policy would make of `doc` against every
    one of its targets (a split's changes merged, each once)."""
    labels: list[LabelVerdict] = []
    cache: dict[int, dict[str, Any]] = {}
    for label in selectors.bundle_labels(bundle):
        pairs = [(t["version_id"], t["number"], t["weight"]) for t in label.targets] or [
            (label.version_id, label.version.number, 100)
        ]
        changes: list[Change] = []
        for version_id, _, _ in pairs:
            if version_id not in cache:
                cache[version_id] = _content(selectors.version_full(version_id))
            changes += diff_contents(cache[version_id], doc).changes
        ordered = by_severity(_merge(changes))
        breaking = [c for c in ordered.changes if c.level == "major"]
        labels.append(
            LabelVerdict(
                name=label.name,
                targets=" · ".join(f"v{n} {w}%" for _, n, w in pairs) if label.targets else f"v{pairs[0][1]}",
                level=ordered.level,
                policy=label.compatibility,
                refused=label.compatibility == Compatibility.BACKWARD and bool(breaking),
                breaking=breaking,
            )
        )
    return labels


def _route(content_hash: str, doc: dict[str, Any], message: str) -> tuple[list[str], list[dict[str, Any]], str]:
    """The resident cards, the routed ones for `message` and how they were routed ("full" or
    "keywords"), with the index a session of this content would route with: a big version's is
    the worker's (skills.index_store.routing_index), never built in this request."""
    if not message.strip() or not doc.get("skills"):
        return [], [], "full"
    index, routing = routing_index(content_hash, doc["skills"], route_embedder())
    result = index.route([{"role": "user", "content": message}], k=5)
    return result.resident, result.routed, routing


def _merge(changes: list[Change]) -> Diff:
    """The changes against every target of a split, each once, at the highest level."""
    level = max((c.level for c in changes), key=LEVELS.index, default="patch")
    seen: dict[tuple[str, str], Change] = {}
    for change in changes:
        seen.setdefault((change.kind, change.path), change)
    return Diff(level=level, changes=list(seen.values()))


# The provider request on the version page: limits on what may be typed into it.
MAX_PREVIEW_JSON = 65_536  # characters of the turn variables
# Where each format is sent, and how it is authenticated (environment variables the reader sets).
ENDPOINTS = {
    "anthropic": (
        "https://api.anthropic.com/v1/messages",
        ['-H "x-api-key: $ANTHROPIC_API_KEY"', '-H "anthropic-version: 2023-06-01"'],
    ),
    "openai-responses": ("https://api.openai.com/v1/responses", ['-H "Authorization: Bearer $OPENAI_API_KEY"']),
    "openai-chat": ("https://api.openai.com/v1/chat/completions", ['-H "Authorization: Bearer $OPENAI_API_KEY"']),
    "bedrock-converse": (
        "https://bedrock-runtime.$AWS_REGION.amazonaws.com/model/{model}/converse",
        ['--aws-sigv4 "aws:amz:$AWS_REGION:bedrock"', '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"'],
    ),
    "gemini": (
        "https://generativelanguage.googleapis.com/v1beta/models/{model}:generateContent",
        ['-H "x-goog-api-key: $GEMINI_API_KEY"'],
    ),
}


@dataclass(frozen=True)
class ProviderPreview:
    format: str
    body: dict[str, Any]
    text: str  # the body as sent: JSON, two-space indented, keys in the order built
    notes: list[str]
    curl: str
    route: dict[str, Any]  # the turn call's route: resident, routed, demoted, turn


def curl_for(fmt: str, body: dict[str, Any], text: str, model: str | None) -> str:
    """A curl command sending `text` (the body) to `fmt`'s endpoint; the body goes in a quoted
    here-document, so the shell expands nothing in it (no line of indented JSON is `JSON`)."""
    url, auth = ENDPOINTS[fmt]
    quoted_model = urllib.parse.quote(model or "MODEL", safe="")
    lines = [f'curl -sS "{url.format(model=quoted_model)}"', *auth, '-H "content-type: application/json"']
    lines.append("--data-binary @- <<'JSON'")
    return " \\\n  ".join(lines) + "\n" + text + "\nJSON\n"


def draft_of(*, bundle: Bundle, content: Any, actor: Actor) -> Draft:
    """A draft from typed content, checked and canonicalised as version_publish would (includes
    resolved first); InvalidContent for what publishing would refuse."""
    if not isinstance(content, dict):
        raise InvalidContent("The draft is not a content document.", {"content": ["A JSON object."]})
    doc, _, content_hash = canonicalise(composition.content_resolved(content=content, bundle=bundle, actor=actor))
    return Draft(content=doc, content_hash=content_hash)


def compose_turn(
    *,
    subject: BundleVersion | Draft,
    fmt: str,
    session_variables: Any,
    turn_variables: Any,
    messages: list[dict[str, Any]],
    earlier: Sequence[dict[str, Any] | None] = (),
    now: datetime | None = None,
) -> ProviderPreview:
    """THE composition of a turn in the admin: the version page's provider request and the
    playground both call this, and only this. The body the turn call (POST /sessions/{id}/turn/
    with `format`) hands over for `messages` on a session of `subject` (a version, or a draft
    not published; turns.preview.conversation_request, the turn call's own steps) whose earlier
    turns routed as `earlier` says (none: a new session's first turn), with the route, the text
    and the curl command the page shows. Raises InvalidContent for what the endpoint refuses."""
    composed = conversation_request(
        subject=subject,
        fmt=fmt,
        session_variables=session_variables,
        variables=turn_variables,
        messages=messages,
        earlier=earlier,
        now=now,
    )
    built = composed.request
    if isinstance(subject, BundleVersion):
        content = content_document(version_id=subject.pk, content_hash=subject.content_hash)
    else:
        content = subject.content
    text = json.dumps(built.body, indent=2, ensure_ascii=False)
    model = providers.model_name(content.get("model") or {})
    return ProviderPreview(
        format=fmt,
        body=built.body,
        text=text,
        notes=built.notes,
        curl=curl_for(fmt, built.body, text, model),
        route=composed.route,
    )


def provider_preview(
    *,
    version: BundleVersion,
    fmt: str,
    session_variables: Any,
    turn_variables: Any,
    message: str,
    now: datetime | None = None,
) -> ProviderPreview:
    """The version page's provider request: compose_turn for the first turn of a new session,
    the one user message `message`."""
    if len(message) > MAX_PREVIEW_MESSAGE:
        raise InvalidContent("The message is too long.", {"message": [f"At most {MAX_PREVIEW_MESSAGE} characters."]})
    return compose_turn(
        subject=version,
        fmt=fmt,
        session_variables=session_variables,
        turn_variables=turn_variables,
        messages=[{"role": "user", "content": message}],
        now=now,
    )
