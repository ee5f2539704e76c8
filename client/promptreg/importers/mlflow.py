"""MLflow's prompt registry, read from a running tracking server over its REST API (no mlflow
package needed: the client reads it with httpx).

MLflow 3 keeps a prompt as a registered model tagged `mlflow.prompt.is_prompt=true`: each
version carries its template in the tag `mlflow.prompt.text` (text, or with
`_mlflow_prompt_type=chat` a JSON list of messages), its commit message as the description,
its model settings as JSON in `_mlflow_prompt_model_config` and a response format in
`_mlflow_prompt_response_format`; aliases (`production`, `champion`) sit on the registered
model. `{{ var }}` is MLflow's template syntax as well as the registry's.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from promptreg.importers import (
    SourceError,
    SourcePrompt,
    SourceVersion,
    bundle_name,
    content,
    declared,
    label_name,
    message,
    split_messages,
)

PROMPT_TAG = "mlflow.prompt.is_prompt"
TEXT_TAG = "mlflow.prompt.text"
TYPE_TAG = "_mlflow_prompt_type"
MODEL_CONFIG_TAG = "_mlflow_prompt_model_config"
RESPONSE_FORMAT_TAG = "_mlflow_prompt_response_format"
_API = "/api/2.0/mlflow"
# A server that never stops answering next_page_token (a bug, a loop of tokens, a hostile
# server) must not keep the import reading for ever: 100 pages of 100 is far above any prompt
# registry we know of (the registry itself keeps 1,000 versions a bundle at most).
PAGE_SIZE = 100
MAX_PAGES = 100
MAX_ITEMS = 10_000


class TrackingServer:
    """The few REST calls the import needs. `token` is sent as a bearer token, `auth` as basic
    authentication (MLflow's MLFLOW_TRACKING_TOKEN / _USERNAME and _PASSWORD)."""

    def __init__(
        self,
        uri: str,
        *,
        token: str | None = None,
        auth: tuple[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=uri.rstrip("/"), headers=headers, auth=auth, timeout=30, transport=transport)

    def __enter__(self) -> TrackingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def _get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._http.get(f"{_API}/{path}", params=params)
        except httpx.TransportError as exc:
            raise SourceError(f"the MLflow tracking server at {self._http.base_url} did not answer: {exc}") from None
        if response.status_code == 404:
            raise SourceError(f"MLflow answered 404 for {path} {params}: {response.text[:300]}")
        if response.status_code >= 400:
            raise SourceError(f"MLflow answered {response.status_code} for {path}: {response.text[:300]}")
        found: dict[str, Any] = response.json()
        return found

    def _pages(self, path: str, key: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Every item of a paginated search, at most MAX_PAGES pages and MAX_ITEMS items (a
        SourceError past either, or when a page token comes back a second time)."""
        results: list[dict[str, Any]] = []
        token: str | None = None
        seen: set[str] = set()
        for _ in range(MAX_PAGES):
            page = self._get(path, {**params, "max_results": PAGE_SIZE, **({"page_token": token} if token else {})})
            items = page.get(key, [])
            if not isinstance(items, list):
                raise SourceError(f"MLflow answered {path} with {key} that is not a list")
            results.extend(items)
            if len(results) > MAX_ITEMS:
                raise SourceError(f"MLflow's {path} holds more than {MAX_ITEMS} items; import fewer prompts (--prompt)")
            token = page.get("next_page_token")
            if not token:
                return results
            if not isinstance(token, str) or token in seen:
                raise SourceError(f"MLflow's {path} answered a page token it had already given: the pages loop")
            seen.add(token)
        raise SourceError(f"MLflow's {path} has more than {MAX_PAGES} pages; import fewer prompts (--prompt)")

    def prompt_names(self) -> list[str]:
        query = {"filter": f"tags.`{PROMPT_TAG}` = 'true'"}
        found = self._pages("registered-models/search", "registered_models", query)
        return sorted(model["name"] for model in found)

    def prompt(self, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the registered model, its versions)."""
        model = self._get("registered-models/get", {"name": name})["registered_model"]
        if _tags(model).get(PROMPT_TAG) != "true":
            raise SourceError(f"{name} is a registered model, not a prompt")
        # MLflow 3 leaves prompt versions out of a version search unless the filter names the tag.
        quoted = name.replace("'", "\\'")
        versions = self._pages(
            "model-versions/search", "model_versions", {"filter": f"name = '{quoted}' AND tags.`{PROMPT_TAG}` = 'true'"}
        )
        return model, versions


def fetch(server: TrackingServer, names: list[str], *, bundle: str | None = None) -> list[SourcePrompt]:
    """Every version of each named prompt (default: every prompt on the server)."""
    names = names or server.prompt_names()
    if bundle is not None and len(names) != 1:
        raise SourceError("--bundle names one bundle: give one --prompt with it")
    return [from_registered(*server.prompt(name), bundle=bundle) for name in names]


def _tags(entity: dict[str, Any]) -> dict[str, str]:
    return {tag["key"]: tag.get("value", "") for tag in entity.get("tags", [])}


def from_registered(
    model: dict[str, Any], versions: list[dict[str, Any]], *, bundle: str | None = None
) -> SourcePrompt:
    """The prompt a registered model and its versions describe (REST shapes), oldest first."""
    name = model["name"]
    aliases: dict[str, list[str]] = {}
    for alias in model.get("aliases", []):
        aliases.setdefault(str(alias["version"]), []).append(label_name(alias["alias"]))
    ordered = sorted(versions, key=lambda v: int(v["version"]))
    return SourcePrompt(
        source="mlflow",
        name=name,
        bundle=bundle or bundle_name(name),
        # Not the model's description: MLflow copies the first version's commit message there.
        description=f"Imported from the MLflow prompt {name}.",
        versions=[_version(name, v, tuple(sorted(aliases.get(str(v["version"]), [])))) for v in ordered],
    )


def _json_tag(tags: dict[str, str], key: str, where: str) -> Any:
    if key not in tags:
        return None
    try:
        return json.loads(tags[key])
    except ValueError:
        raise SourceError(f"{where}: the tag {key} is not JSON") from None


def _version(name: str, entry: dict[str, Any], labels: tuple[str, ...]) -> SourceVersion:
    number = str(entry["version"])
    where = f"{name} version {number}"
    tags = _tags(entry)
    if TEXT_TAG not in tags:
        raise SourceError(f"{where}: no {TEXT_TAG} tag (not a prompt version)")
    origin: dict[str, Any] = {"system": "mlflow", "name": name, "version": int(number)}
    notes: list[str] = []
    if tags.get(TYPE_TAG) == "chat":
        system_prompt, others, notes = split_messages(_json_tag(tags, TEXT_TAG, where), where)
        if others:
            origin["messages"] = others
        texts = [system_prompt, *(m["content"] for m in others if isinstance(m.get("content"), str))]
    else:
        system_prompt = tags[TEXT_TAG]
        texts = [system_prompt]
    settings = _json_tag(tags, MODEL_CONFIG_TAG, where) or {}
    if not isinstance(settings, dict):
        raise SourceError(f"{where}: {MODEL_CONFIG_TAG} must be a JSON object")
    model = {("name" if k == "model_name" else k): v for k, v in settings.items()}
    schema = _json_tag(tags, RESPONSE_FORMAT_TAG, where)
    ref = f"mlflow {name} version {number}"
    return SourceVersion(
        ref=ref,
        content=content(
            system_prompt=system_prompt,
            origin=origin,
            model=model,
            output_schema=schema if isinstance(schema, dict) else None,
            variables=declared(texts),
        ),
        message=message(text=entry.get("description"), ref=ref, author=entry.get("user_id")),
        labels=labels,
        notes=tuple(notes),
    )
