"""Content-addressed export and import of bundles over REST (what `promptreg export`,
`promptreg import-bundles` and `promptreg import` call): serializers, then thin views. The
rules live in registry.transfer and registry.imports."""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from access.models import Role
from api.answers import etag_matches
from api.authentication import actor_of
from api.common import (
    BaseApi,
    StrictBooleanField,
    StrictCharField,
    StrictInput,
    StrictIntegerField,
    not_modified,
    valid,
)
from core import limits
from core.errors import DomainError, InvalidContent
from registry import imports, transfer
from registry import selectors as registry_selectors


class ExportTargetOut(serializers.Serializer):
    content_hash = serializers.CharField()
    number = serializers.IntegerField()
    weight = serializers.IntegerField()


class ExportLabelOut(serializers.Serializer):
    name = serializers.CharField()
    targets = ExportTargetOut(many=True)
    protected = serializers.BooleanField()
    compatibility = serializers.CharField()


class ExportVersionOut(serializers.Serializer):
    number = serializers.IntegerField()
    content_hash = serializers.CharField()
    message = serializers.CharField()
    author = serializers.CharField()
    created_at = serializers.CharField()
    revoked = serializers.BooleanField()


class BundleDocumentOut(serializers.Serializer):
    format = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    when_to_use = serializers.CharField(allow_blank=True)
    versions = ExportVersionOut(many=True)
    labels = ExportLabelOut(many=True)


class ImportIn(StrictInput):
    bundle = serializers.JSONField(help_text="A bundle document, as GET .../export/ answers it.")
    objects = serializers.DictField(
        child=StrictCharField(trim_whitespace=False, allow_blank=True, max_length=limits.CANONICAL_MAX_BYTES),
        required=False,
        default=dict,
        help_text="Canonical bytes (UTF-8 text) by content hash, for the versions this registry may lack.",
    )
    allow_breaking = serializers.BooleanField(required=False, default=False)


class ImportOut(serializers.Serializer):
    bundle = serializers.CharField()
    bundle_created = serializers.BooleanField()
    versions_created = serializers.ListField(child=serializers.IntegerField())
    versions_present = serializers.ListField(child=serializers.IntegerField())
    labels_moved = serializers.ListField(child=serializers.CharField())
    labels_unchanged = serializers.ListField(child=serializers.CharField())
    revoked = serializers.ListField(child=serializers.IntegerField())


class BundleExportApi(BaseApi):
    @extend_schema(
        summary="Export a bundle (its document)",
        description=(
            "The bundle's document for a content-addressed export: its texts, every version's number, "
            "content hash, message and whether it is revoked, and every label's targets by content hash. "
            "The bytes of each version come from `GET .../versions/{number}/canonical/`."
        ),
        responses=BundleDocumentOut,
    )
    def get(self, request: Request, name: str) -> Response:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        document, _ = transfer.bundle_export(bundle=bundle, actor=actor_of(request))
        return Response(document)


class VersionCanonicalApi(BaseApi):
    @extend_schema(
        summary="A version's canonical bytes",
        description=(
            "Exactly the bytes whose SHA-256 is the version's `content_hash` (also the `ETag`; a matching "
            "`If-None-Match` answers 304)."
        ),
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT), 304: OpenApiResponse(description="Not modified")},
    )
    def get(self, request: Request, name: str, number: int) -> HttpResponse:
        bundle = registry_selectors.bundle_get(name=name, actor=actor_of(request))
        version = registry_selectors.version_get(bundle=bundle, number=number)
        if etag_matches(request.headers.get("If-None-Match"), version.content_hash):
            return not_modified(version.content_hash)
        response = HttpResponse(bytes(version.canonical), content_type="application/json")
        response["ETag"] = f'"{version.content_hash}"'
        return response


class BundleImportApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Import a bundle document",
        description=(
            "Publisher role (ops to move a protected label or revoke). `bundle` is a document as the export "
            "answers it, whose `name` must be the one in the path; `objects` carries the canonical bytes of "
            "the versions this registry may not have, by content hash. Every object is checked against its "
            "hash and the canonical form first: a mismatch is a 400 and nothing is written. Then, in one "
            "transaction: the bundle is created if needed, versions it lacks are published (the same hashes "
            "come out), labels are pointed at the versions with their hashes and revoked versions revoked. "
            "Importing the same document again changes nothing."
        ),
        request=ImportIn,
        responses=ImportOut,
    )
    def post(self, request: Request, name: str) -> Response:
        data = valid(ImportIn, request)
        document = data["bundle"]
        if not isinstance(document, dict) or document.get("name") != name:
            raise InvalidContent("The document is not for this bundle.", {"bundle.name": [f"Must be {name!r}."]})
        try:
            objects = {digest: text.encode("utf-8") for digest, text in data["objects"].items()}
        except UnicodeEncodeError:
            raise InvalidContent("An object is not valid Unicode.", {"objects": ["Lone surrogate."]}) from None
        result = transfer.bundle_import(
            document=document, objects=objects, actor=actor_of(request), allow_breaking=data["allow_breaking"]
        )
        return Response(result.as_dict())


class ImportVersionIn(StrictInput):
    content = serializers.JSONField()
    message = StrictCharField(max_length=limits.TEXT_MAX_CHARS)


class ImportVersionsIn(StrictInput):
    source = StrictCharField(max_length=500, help_text="Where the versions come from, for the labels' reasons.")  # type: ignore[assignment]  # a field named source
    description = StrictCharField(max_length=limits.TEXT_MAX_CHARS, required=False, allow_blank=True, default="")
    versions = ImportVersionIn(many=True, allow_empty=False, max_length=limits.IMPORT_MAX_VERSIONS)  # type: ignore[call-arg]  # DRF's ListSerializer takes it; the stubs lag
    labels = serializers.DictField(
        child=StrictIntegerField(min_value=0), required=False, default=dict, help_text="label -> index in versions"
    )
    allow_breaking = StrictBooleanField(required=False, default=False)
    dry_run = StrictBooleanField(required=False, default=False)

    def validate_labels(self, value: dict[str, int]) -> dict[str, int]:
        if len(value) > limits.IMPORT_MAX_LABELS:
            raise serializers.ValidationError(f"At most {limits.IMPORT_MAX_LABELS} labels.")
        count = len(self.initial_data.get("versions") or []) if isinstance(self.initial_data, dict) else 0
        for name, index in value.items():
            if len(name) > limits.LABEL_NAME_MAX:  # its form is label_move's rule, refused as a step
                raise serializers.ValidationError(f"A label name has at most {limits.LABEL_NAME_MAX} characters.")
            if index >= count:
                raise serializers.ValidationError(f"{name}: {index} is not the index of a version in `versions`.")
        return value


class ImportVersionsOut(serializers.Serializer):
    bundle = serializers.CharField()
    bundle_exists = serializers.BooleanField()
    versions = serializers.JSONField(help_text="Per version given: {version, content_hash, exists, refused}.")
    labels = serializers.JSONField(help_text="Per label: {label, from, to, moved}.")
    refused = serializers.JSONField(help_text="Per refused step: {step, status, code, message, details}.")
    dry_run = serializers.BooleanField()
    applied = serializers.BooleanField()


class BundleImportVersionsApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(
        summary="Import a prompt's versions and labels (all or nothing; or a dry run)",
        description=(
            "What `promptreg import` calls. In one transaction, with the caller's key: the bundle is created if "
            "needed, each version published oldest first (content already here is that version), each label "
            "pointed at its version, through the same rules as the bundle, version and label endpoints "
            "(permissions, protected labels, compatibility, required checks and approvals). A step refused "
            "there is refused here and the others still run, so that every refusal is reported. "
            "`dry_run: true`: 200 with what the run would do (the version numbers it would give) and `refused`; "
            "nothing is written. Otherwise 200 with what was done, or, when any step is refused, nothing is "
            "written and the answer is the first refusal's status and code, `details.refused` listing each."
        ),
        request=ImportVersionsIn,
        responses=ImportVersionsOut,
    )
    def post(self, request: Request, name: str) -> Response:
        data = valid(ImportVersionsIn, request)
        result = imports.import_versions(
            name=name,
            description=data["description"],
            versions=[imports.ImportVersion(v["content"], v["message"]) for v in data["versions"]],
            labels=data["labels"],
            source=data["source"],
            actor=actor_of(request),
            allow_breaking=data["allow_breaking"],
            dry_run=data["dry_run"],
        )
        if result["refused"] and not data["dry_run"]:
            first = result["refused"][0]
            refusal = DomainError(
                f"The import was refused, so nothing was written: {first['step']}: {first['message']}",
                {"refused": result["refused"]},
            )
            refusal.status, refusal.code = first["status"], first["code"]
            raise refusal
        return Response(ImportVersionsOut(result).data)
