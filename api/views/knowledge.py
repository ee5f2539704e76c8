"""Knowledge packs, their files and the model's file tools over a session's packs: serializers,
then the thin views (the per-turn render is api/routes.py's)."""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.response import Response

from access import ratelimit
from access.models import Role
from api.answers import entity_tags
from api.authentication import actor_of
from api.common import BaseApi, IdentifierField, StrictCharField, StrictInput, paginate, valid
from api.pagination import paginated
from core import limits
from core.errors import InvalidContent
from knowledge import selectors, services, tools


class PackIn(StrictInput):
    name = IdentifierField(max_length=100)
    description = StrictCharField(required=False, allow_blank=True, max_length=limits.TEXT_MAX_CHARS, default="")


class PackOut(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    created_at = serializers.DateTimeField()
    created_by = serializers.CharField()


class FileIn(StrictInput):
    content = StrictCharField(allow_blank=True, trim_whitespace=False)


class ManifestEntryOut(serializers.Serializer):
    path = serializers.CharField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    updated_at = serializers.DateTimeField()


class ManifestOut(serializers.Serializer):
    pack = serializers.CharField()
    files = ManifestEntryOut(many=True)


class FileOut(ManifestEntryOut):
    pack = serializers.CharField(source="pack.name")
    content = serializers.CharField()
    updated_by = serializers.CharField()


ToolOut = inline_serializer(
    name="KnowledgeToolOut", fields={"output": serializers.CharField(), "truncated": serializers.BooleanField()}
)


class PackListApi(BaseApi):
    roles = {"POST": Role.PUBLISHER}

    @extend_schema(summary="List knowledge packs", operation_id="knowledge_packs_list", responses=paginated(PackOut))
    def get(self, request: Request) -> Response:
        return paginate(self, request, selectors.packs_visible(actor_of(request)), PackOut, "name")

    @extend_schema(
        summary="Create a knowledge pack",
        operation_id="knowledge_pack_create",
        request=PackIn,
        responses={201: PackOut},
    )
    def post(self, request: Request) -> Response:
        data = valid(PackIn, request)
        pack = services.pack_create(name=data["name"], description=data["description"], actor=actor_of(request))
        return Response(PackOut(pack).data, status=201)


class PackDetailApi(BaseApi):
    @extend_schema(summary="Get a knowledge pack", operation_id="knowledge_pack_get", responses=PackOut)
    def get(self, request: Request, pack: str) -> Response:
        return Response(PackOut(selectors.pack_get(name=pack, actor=actor_of(request))).data)


class ManifestApi(BaseApi):
    """The machine manifest (for sync tools): every file's path, size, sha256 and updated_at."""

    @extend_schema(operation_id="knowledge_manifest", responses=ManifestOut)
    def get(self, request: Request, pack: str) -> Response:
        found = selectors.pack_get(name=pack, actor=actor_of(request))
        return Response(ManifestOut({"pack": found.name, "files": selectors.manifest(found)}).data)


class FileApi(BaseApi):
    roles = {"PUT": Role.PUBLISHER, "DELETE": Role.PUBLISHER}

    @extend_schema(summary="Read a file of a knowledge pack", operation_id="knowledge_file_get", responses=FileOut)
    def get(self, request: Request, pack: str, path: str) -> Response:
        found = selectors.pack_get(name=pack, actor=actor_of(request))
        file = selectors.file_get(pack=found, path=path)
        response = Response(FileOut(file).data)
        response["ETag"] = f'"{file.sha256}"'  # what a PUT's If-Match names
        return response

    @extend_schema(
        summary="Write a file of a knowledge pack (201 created, 200 replaced)",
        description=(
            'Publisher role. `If-Match: "<sha256>"` (the ETag of the GET; several tags, or `*` for "it '
            'exists") replaces the file only if it is still that one; `If-None-Match: *` creates it only '
            "if it does not exist. Otherwise 412 `precondition_failed` with `details.current.sha256`."
        ),
        operation_id="knowledge_file_put",
        request=FileIn,
        responses={200: FileOut, 201: FileOut},
    )
    def put(self, request: Request, pack: str, path: str) -> Response:
        found = selectors.pack_get(name=pack, actor=actor_of(request))
        data = valid(FileIn, request)
        file, created = services.file_put(
            pack=found,
            path=path,
            content=data["content"],
            actor=actor_of(request),
            if_match=entity_tags(request.headers.get("If-Match")),
            if_none_match=request.headers.get("If-None-Match", "").strip() == "*",
        )
        response = Response(FileOut(file).data, status=201 if created else 200)
        response["ETag"] = f'"{file.sha256}"'
        return response

    @extend_schema(
        summary="Delete a file of a knowledge pack", operation_id="knowledge_file_delete", responses={204: None}
    )
    def delete(self, request: Request, pack: str, path: str) -> Response:
        found = selectors.pack_get(name=pack, actor=actor_of(request))
        services.file_delete(pack=found, path=path, actor=actor_of(request))
        return Response(status=204)


_TOOL_PARAMS = {
    "ls": ["path", "offset"],
    "glob": ["pattern", "offset"],
    "grep": ["pattern", "path", "offset"],
    "read": ["path", "offset", "limit"],
}


class SessionKnowledgeToolApi(BaseApi):
    """GET one of the model's file tools over this session's packs (ls, glob, grep, read)."""

    @extend_schema(
        operation_id="session_knowledge_tool",
        parameters=[
            OpenApiParameter("tool", OpenApiTypes.STR, OpenApiParameter.PATH, enum=sorted(_TOOL_PARAMS)),
            OpenApiParameter("path", OpenApiTypes.STR),
            OpenApiParameter("pattern", OpenApiTypes.STR),
            OpenApiParameter("offset", OpenApiTypes.INT),
            OpenApiParameter("limit", OpenApiTypes.INT),
        ],
        responses={
            200: ToolOut,
            400: OpenApiResponse(description="Bad path or pattern"),
            429: OpenApiResponse(description="The key has FILE_TOOL_CONCURRENCY file-tool calls running"),
        },
    )
    def get(self, request: Request, session_id, tool: str) -> Response:
        run = tools.TOOLS.get(tool)
        if run is None:
            raise InvalidContent(f"No file tool {tool!r}.", {"tool": [f"One of {', '.join(sorted(tools.TOOLS))}."]})
        params = request.query_params
        unknown = sorted(set(params) - set(_TOOL_PARAMS[tool]))
        if unknown:
            raise InvalidContent("Unknown parameters.", {name: ["Unknown parameter."] for name in unknown})
        if any("\x00" in value for value in params.values()):
            raise InvalidContent("A parameter holds a NUL character.", {"query": ["Not allowed."]})
        actor = actor_of(request)
        slot = ratelimit.file_tool_slot(actor=actor)
        if slot is None:
            raise Throttled(
                wait=1,
                detail=f"This key already has {settings.FILE_TOOL_CONCURRENCY} file-tool calls running: "
                "wait for one to finish.",
            )
        with slot:
            answer = run(session_id=session_id, actor=actor, **{name: params.get(name) for name in _TOOL_PARAMS[tool]})
        return Response({"output": answer.output, "truncated": answer.truncated})
