"""Derive: a version published again on another model, equal to it except the model settings
(POST /api/v1/bundles/{name}/versions/{n}/derive/, the admin's "Migrate to replacement")."""

from dataclasses import dataclass
from typing import Any

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from core.errors import InvalidContent, NotFound
from modelcatalog.selectors import content_model
from registry import lifecycle
from registry.models import Bundle, BundleVersion
from registry.selectors import version_model_info
from registry.services import PublishResult, version_publish

# Model settings one provider's API takes and the others' do not (Anthropic Messages, OpenAI
# Chat Completions / Responses, Gemini generateContent): what a derive to another provider's
# model drops, with a note, unless the new settings give them again.
PROVIDER_ONLY_SETTINGS: dict[str, frozenset[str]] = {
    "anthropic": frozenset({"top_k", "thinking", "stop_sequences"}),
    "openai": frozenset({"frequency_penalty", "presence_penalty", "logit_bias", "seed", "reasoning_effort", "n"}),
    "google": frozenset({"top_k", "candidate_count", "response_mime_type"}),
}
DERIVE_MODEL_KEYS_MAX = 50


@dataclass(frozen=True)
class DeriveResult:
    published: PublishResult
    source: BundleVersion
    notes: list[str]


def version_derive(*, bundle: Bundle, number: int, model: Any, message: Any, actor: Actor) -> DeriveResult:
    """Publish a version equal to version `number` except its `model` settings: the given
    settings laid over the old ones (a key set to null is removed), and the settings only the
    old model's provider takes dropped when the provider changes (each drop noted). Published
    with version_publish, so it is checked (a retired target model is 400 model_retired) and
    classified by the contract diff like any version; identical content is the existing version."""
    require_role(actor, Role.PUBLISHER, "Deriving a version")
    require_bundle_scope(actor, bundle.name)
    if not isinstance(model, dict) or not model or len(model) > DERIVE_MODEL_KEYS_MAX:
        raise InvalidContent(
            "model must be an object of settings.", {"model": [f"1 to {DERIVE_MODEL_KEYS_MAX} settings, e.g. name."]}
        )
    source = BundleVersion.objects.filter(bundle=bundle, number=number).first()
    if source is None:
        raise NotFound(f"Bundle {bundle.name!r} has no version {number}.")
    doc = lifecycle.content_of(source)
    found = doc.get("model")
    old: dict[str, Any] = found if isinstance(found, dict) else {}
    new = {**old, **model}
    new = {key: value for key, value in new.items() if value is not None}
    notes = []
    _, old_info = version_model_info(source)
    new_info = content_model(new)
    if old_info is not None and new_info is not None and old_info.provider != new_info.provider:
        for key in sorted(PROVIDER_ONLY_SETTINGS.get(old_info.provider, frozenset()) - set(model)):
            if key in new:
                del new[key]
                notes.append(f"Dropped model.{key}: {new_info.provider} models do not take it.")
    limit = new_info.output_limit if new_info is not None else None
    max_tokens = new.get("max_tokens")
    if isinstance(max_tokens, int) and limit is not None and max_tokens > limit:
        notes.append(
            f"model.max_tokens {max_tokens} is above {new_info.name if new_info else ''}'s output limit {limit}."
        )
    doc["model"] = new
    published = version_publish(bundle=bundle, content=doc, message=message, actor=actor)
    return DeriveResult(published=published, source=source, notes=notes)
