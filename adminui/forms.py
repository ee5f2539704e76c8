"""Forms of the admin UI. They parse what a person typed; the rules themselves (names,
content, reasons, roles) live in the services, whose errors `add_domain_error` puts back
next to the field they are about, with everything typed kept."""

import json
from typing import Any

from django import forms

from core import limits
from core.errors import DomainError, InvalidContent
from registry import includes
from registry.canonical import CONTENT_FIELDS, DEFAULTS

# data-editor: adminui/static/adminui/editor.js puts a code editor over the textarea ("json":
# with JSON highlighting); the textarea stays the form field, so the form works without it.
CODE = {"class": "adminui-code", "spellcheck": "false", "autocomplete": "off"}
# Optional content fields (docs/rendering.md): left out of the document when their box is empty,
# so a version written here keeps them exactly when its author does.
OPTIONAL_JSON_FIELDS = ("variables", "knowledge", "skills", "compaction", "mcp_servers")
JSON_FIELDS = ("tools", "guardrails", "output_schema", "model", "metadata", *OPTIONAL_JSON_FIELDS)
ABSENT: Any = object()
# The content fields this form has no box for (skills, compaction, any field added later): derived
# from the content schema, carried from the version the form starts from, unchanged. Not the
# resolved includes: the form shows the prompt as written, which publishing resolves again.
CARRIED_FIELDS = tuple(sorted(CONTENT_FIELDS - {"system_prompt", *JSON_FIELDS, *includes.FIELDS}))


def add_domain_error(
    form: forms.Form, exc: DomainError, *, field_map: dict[str, str] | None = None, default: str | None = None
) -> None:
    """Attach a service's error to the form: each InvalidContent path to the field it names
    ("content.tools[0].name" -> tools, shown as "tools[0].name: ..."), other errors to the
    field their details name, else to `default` (None: the whole form)."""
    field_map = field_map or {}

    def target(path: str) -> str | None:
        if path in field_map:
            return field_map[path]
        key = path.removeprefix("content.")
        head = key.split(".")[0].split("[")[0]
        return head if head in form.fields else None

    if isinstance(exc, InvalidContent) and exc.details:
        for path, messages in exc.details.items():
            where = target(path)
            for message in messages if isinstance(messages, list) else [messages]:
                key = path.removeprefix("content.")
                # Say where inside the field, unless the path is the field itself.
                text = f"{key}: {message}" if where is None or key != where else str(message)
                form.add_error(where, text)
        return
    for path in exc.details:
        where = target(path)
        if where is not None:
            form.add_error(where, exc.message)
            return
    form.add_error(default, exc.message)


def set_choices(form: forms.Form, name: str, choices: list[Any]) -> None:
    """Give the choice field `name` of `form` its choices (known only per request)."""
    field = form.fields[name]
    assert isinstance(field, forms.ChoiceField)
    field.choices = choices


class BundleCreateForm(forms.Form):
    name = forms.CharField(
        max_length=limits.BUNDLE_NAME_MAX,
        help_text="Lowercase letters, digits, dot, dash and underscore; starts with a letter or digit.",
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    when_to_use = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        help_text="Shown to agents in the capability catalog: when to pick this bundle.",
    )


class BundleEditForm(forms.Form):
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    when_to_use = BundleCreateForm.base_fields["when_to_use"]
    # The bundle as the editor read it (registry.services.bundle_etag): a save over someone
    # else's change is refused (412) rather than silently overwriting it.
    etag = forms.CharField(widget=forms.HiddenInput, max_length=64)


class JsonField(forms.CharField):
    """A textarea holding JSON. Empty means the content document's default for the field."""

    def __init__(self, *, default: Any, **kwargs: Any) -> None:
        self.default = default
        kwargs.setdefault("required", False)
        kwargs.setdefault("strip", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={**CODE, "rows": 8, "data-editor": "json"}))
        super().__init__(**kwargs)

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if not text.strip():
            return self.default
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"This is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.", code="json"
            ) from None


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


class VersionForm(forms.Form):
    system_prompt = forms.CharField(
        required=False,  # the service says what is wrong with an empty prompt, with the other content errors
        strip=False,
        widget=forms.Textarea(
            attrs={**CODE, "rows": 18, "class": "adminui-code adminui-prompt", "data-editor": "text"}
        ),
    )
    tools = JsonField(
        default=DEFAULTS["tools"],
        help_text='A JSON list of {"name", "description", "input_schema"} objects.',
        widget=forms.Textarea(attrs={**CODE, "rows": 14, "data-editor": "json"}),
    )
    guardrails = JsonField(
        default=DEFAULTS["guardrails"],
        help_text='{"default": "allow" | "confirm" | "deny", "rules": [{"tool": "name", "effect": "allow" | "confirm" '
        '| "deny", "reason": "..."}]}: at most one rule per tool, naming tools of this version; a tool\'s effect is '
        'its rule\'s, else the default ("allow" when absent). {} allows every tool. Tightening an effect '
        "(allow < confirm < deny) is a breaking change.",
    )
    output_schema = JsonField(
        default=DEFAULTS["output_schema"],
        help_text='A JSON Schema (Draft 2020-12) the answer must validate against, e.g. {"type": "object", '
        '"properties": {"answer": {"type": "string"}}, "required": ["answer"]}; null: free text.',
    )
    model = JsonField(default=DEFAULTS["model"], help_text="A JSON object: model name, temperature, ...")
    metadata = JsonField(default=DEFAULTS["metadata"], help_text="A JSON object.")
    variables = JsonField(
        default=ABSENT,
        help_text='Optional: {"name": {"type": "string", "scope": "session", ...}}, filled into {{name}} in the '
        "prompt. Empty: no variables, and the prompt is used verbatim.",
    )
    knowledge = JsonField(
        default=ABSENT,
        help_text='Optional: the knowledge packs its sessions may explore, e.g. ["ops"]. Empty: none.',
    )
    skills = JsonField(
        default=ABSENT,
        help_text='Optional: a JSON list of skill cards {"name" (snake_case), "summary" (at most 60 characters, '
        'saying when: "Use when ..."), "description" (at most 4,000), "keywords" (3 to 10), "category", "examples" '
        '(2 to 3), "level" ("L1": always loaded, at most 8 cards and 1,500 tokens; "L2": routed), optional '
        '"exclusive_group" and "triggers" (up to 10 RE2 patterns)}. Empty: no skills. See docs/skills.md.',
        widget=forms.Textarea(attrs={**CODE, "rows": 12, "data-editor": "json"}),
    )
    compaction = JsonField(
        default=ABSENT,
        help_text='Optional: {"keep_tool_results": n, "max_tool_result_chars": n, "placeholder": "...", '
        '"elide_step": n}, how long sessions drop old tool results (elide_step: elide them n + 1 at a time, so the '
        "provider's cached conversation survives n tool calls). Empty: the default policy.",
    )
    mcp_servers = JsonField(
        default=ABSENT,
        help_text='Optional: [{"name", "url", "tools": ["tool_name", ...]}], tools whose schemas come from an MCP '
        "server: a declared tool not in Tools yet is listed from its server at publish and pinned into Tools "
        "(docs/operations.md, Retiring a tool backend). Empty: none.",
    )
    # Not content: a message to try the skills' routing on, for "Check against vN" only.
    route_message = forms.CharField(
        required=False,
        max_length=4000,
        label="Try a message (routing preview)",
        help_text="With Check: which skill cards would load for this user message (the route service's index).",
        widget=forms.Textarea(attrs={"rows": 2}),
    )
    # The fields without a box, as JSON: {field: value} of the source version (CARRIED_FIELDS).
    carried = forms.CharField(required=False, strip=False, widget=forms.HiddenInput)
    message = forms.CharField(
        label="Change message",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What changed and why; shown in the history.",
        error_messages={"required": "Say what changed: a change message is required."},
    )

    @classmethod
    def initial_from(cls, content: dict[str, Any]) -> dict[str, str]:
        # A version with includes starts from its source, markers intact (registry.includes).
        content = includes.source_of(content)
        initial = {"system_prompt": content.get("system_prompt", "")}
        for name in JSON_FIELDS:
            if name in content or name not in OPTIONAL_JSON_FIELDS:
                initial[name] = pretty_json(content.get(name, DEFAULTS.get(name)))
        initial["carried"] = json.dumps({k: content[k] for k in CARRIED_FIELDS if k in content}, ensure_ascii=False)
        return initial

    def clean_carried(self) -> dict[str, Any]:
        text = self.cleaned_data.get("carried") or ""
        try:
            value = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise forms.ValidationError("The fields carried from the source version were damaged; load it again.")
        # Only the fields without a box: the carried part never overrides what was typed.
        return {k: v for k, v in value.items() if k in CARRIED_FIELDS}

    @property
    def carried_names(self) -> list[str]:
        """The fields carried unchanged, for the note on the form."""
        value = self.cleaned_data.get("carried") if hasattr(self, "cleaned_data") else None
        if not isinstance(value, dict):
            raw = self["carried"].value() or ""
            try:
                value = json.loads(raw) if raw.strip() else {}
            except json.JSONDecodeError:
                value = {}
        return sorted(value) if isinstance(value, dict) else []

    def content(self) -> dict[str, Any]:
        """The content document from the fields that parsed (call after is_valid())."""
        doc = {"system_prompt": self.cleaned_data.get("system_prompt", "")}
        for name in JSON_FIELDS:
            if name in self.cleaned_data and self.cleaned_data[name] is not ABSENT:
                doc[name] = self.cleaned_data[name]
        carried = self.cleaned_data.get("carried")
        if isinstance(carried, dict):
            doc.update(carried)
        return doc


# Rows of the split on the move page (the service allows up to core.limits.MAX_SPLIT_TARGETS;
# a ramp is two versions, a comparison a few).
SPLIT_ROWS = min(4, limits.MAX_SPLIT_TARGETS)


class MoveForm(forms.Form):
    """Step one of a label move: which label, then one version or a split (rows of version and
    weight), and why. Only the shape is checked here; whether the split is valid (weights sum
    to 100, no version twice) is the service's rule, whose errors land on `targets` or the row."""

    # A CharField shown as a select of the labels this person may move: a forged name is not
    # stopped here but by the service, which is the one place that rule lives.
    label = forms.CharField(required=False, widget=forms.Select, help_text="Only the labels you may move are offered.")
    new_label = forms.CharField(
        required=False,
        max_length=limits.LABEL_NAME_MAX,
        label="or a new label",
        help_text="Lowercase letters, digits, dash and underscore.",
    )
    version = forms.TypedChoiceField(
        coerce=int,
        required=False,
        empty_value=None,
        help_text="Every new session on the label is pinned to this version. Or leave it empty and split below.",
    )
    # Not typed into: it carries the errors about the split as a whole (shown above its rows).
    targets = forms.CharField(required=False, widget=forms.HiddenInput, label="Split")
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Recorded in the label's history.",
        error_messages={"required": "Say why: a reason is required for every move."},
    )

    def __init__(
        self, *args: Any, labels: list[tuple[str, str]], versions: list[tuple[int, str]], **kwargs: Any
    ) -> None:
        """`labels`: (name, text shown) of the labels offered."""
        super().__init__(*args, **kwargs)
        self.fields["label"].widget.choices = [("", "(another new label, named below)"), *labels]
        set_choices(self, "version", [("", "(split below)"), *versions])
        for row in range(1, SPLIT_ROWS + 1):
            self.fields[f"split_version_{row}"] = forms.TypedChoiceField(
                coerce=int, required=False, empty_value=None, label=f"Split row {row}: version"
            )
            set_choices(self, f"split_version_{row}", [("", "—"), *versions])
            self.fields[f"split_weight_{row}"] = forms.IntegerField(
                required=False, label=f"Split row {row}: weight (%)", widget=forms.NumberInput(attrs={"size": 4})
            )

    @property
    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in ("label", "new_label", "version")]

    @property
    def reason_fields(self) -> list[forms.BoundField]:
        return [self["reason"]]

    @property
    def split_rows(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [(self[f"split_version_{r}"], self[f"split_weight_{r}"]) for r in range(1, SPLIT_ROWS + 1)]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        label, new_label = data.get("label"), (data.get("new_label") or "").strip()
        if label and new_label:
            self.add_error("new_label", "Pick an existing label or name a new one, not both.")
        elif not label and not new_label:
            self.add_error("label", "Pick the label to move, or name a new one.")
        data["name"] = label or new_label
        # The split's rows as typed: (row, version number, weight); half-filled rows are errors.
        rows: list[tuple[int, int, int]] = []
        for row in range(1, SPLIT_ROWS + 1):
            number, weight = data.get(f"split_version_{row}"), data.get(f"split_weight_{row}")
            if f"split_version_{row}" in self.errors or f"split_weight_{row}" in self.errors:
                continue
            if number is None and weight is None:
                continue
            if number is None:
                self.add_error(f"split_version_{row}", "Pick the version this weight is for.")
            elif weight is None:
                self.add_error(f"split_weight_{row}", f"Give v{number} a weight (0 to 100).")
            else:
                rows.append((row, number, weight))
        data["split"] = rows
        has_split = bool(rows) or any(k.startswith("split_") for k in self.errors)
        if data.get("version") is not None and has_split:
            self.add_error("version", "Pick one version or fill in a split, not both.")
        elif data.get("version") is None and not has_split:
            self.add_error("version", "Pick a version, or split new sessions between versions below.")
        return data


class RollbackForm(forms.Form):
    version = forms.TypedChoiceField(coerce=int, help_text="Versions this label targeted before.")
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Recorded in the label's history.",
        error_messages={"required": "Say why: a reason is required for a rollback."},
    )

    def __init__(self, *args: Any, versions: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        set_choices(self, "version", versions)


class RevokeForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Recorded with the version and in the audit log.",
        error_messages={"required": "Say why: a reason is required to revoke a version."},
    )


class VersionSearchForm(forms.Form):
    q = forms.CharField(required=False, label="Search", help_text="Bundle, message, author, hash prefix or bundle@n.")
    bundle = forms.ChoiceField(required=False)
    state = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, bundles: list[str], states: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        set_choices(self, "bundle", [("", "any bundle")] + [(b, b) for b in bundles])
        set_choices(self, "state", [("", "any state")] + states)


class SessionSearchForm(forms.Form):
    bundle = forms.ChoiceField(required=False)
    version = forms.IntegerField(required=False, min_value=1)
    status = forms.ChoiceField(required=False)
    q = forms.CharField(required=False, label="External id or session id")

    def __init__(self, *args: Any, bundles: list[str], statuses: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        set_choices(self, "bundle", [("", "any bundle")] + [(b, b) for b in bundles])
        set_choices(self, "status", [("", "any status")] + statuses)


class LabelPolicyForm(forms.Form):
    """A label's policy (registry.services.label_policy_set checks every value)."""

    protected = forms.BooleanField(required=False, help_text="Only ops may move a protected label.")
    compatibility = forms.ChoiceField(
        choices=[("none", "none"), ("backward", "backward")],
        help_text="backward: a move to a version that is major against the current target is refused "
        "unless the breaking change is allowed.",
    )
    required_checks = forms.CharField(
        required=False,
        max_length=limits.REQUIRED_CHECKS_MAX * (limits.CHECK_NAME_MAX + 2),
        help_text="Check names, comma separated: a new target's content must have a success of each.",
    )
    required_approvals = forms.IntegerField(
        min_value=0,
        max_value=limits.REQUIRED_APPROVALS_MAX,
        help_text="How many people other than its author must approve a new target's content.",
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=limits.TEXT_MAX_CHARS,
        help_text="Recorded in the label's history and the audit log.",
        error_messages={"required": "Say why: a reason is required to change a label's policy."},
    )

    def clean_required_checks(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["required_checks"].split(",") if name.strip()]


class ApprovalForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        max_length=limits.TEXT_MAX_CHARS,
        help_text="What you checked. Recorded with the approval and in the audit log.",
        error_messages={"required": "Say why: a reason is required to approve a version."},
    )


class ModelFactsForm(forms.Form):
    """The admin's correction of one model of the catalog: the facts filled in are set
    (modelcatalog.services.model_put, audited); a blank field leaves the fact as it is."""

    provider = forms.CharField(max_length=50, help_text="anthropic, openai, google, amazon, or your own.")
    name = forms.CharField(max_length=200, help_text="The catalog's name (a new name adds a model).")
    retires_at = forms.DateField(required=False, help_text="YYYY-MM-DD: requests naming it fail from this day.")
    deprecated_at = forms.DateField(required=False)
    replacement = forms.CharField(max_length=200, required=False)
    cache_floor_tokens = forms.IntegerField(required=False, min_value=1, max_value=100_000_000)
    source_url = forms.CharField(max_length=2000, help_text="Where you read these facts.")
    source_read = forms.DateField(help_text="YYYY-MM-DD: when you read it.")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), help_text="Recorded in the audit log.")

    FACTS = ("retires_at", "deprecated_at", "replacement", "cache_floor_tokens")

    def facts(self) -> dict[str, Any]:
        data = self.cleaned_data
        out: dict[str, Any] = {}
        for fact in self.FACTS:
            value = data.get(fact)
            if value in (None, ""):
                continue
            out[fact] = value.isoformat() if hasattr(value, "isoformat") else value
        return out
