"""The TypeScript client (clients/typescript, npm package `promptreg`) against the real
service: its node tests run on a live server process (tests/live.py) with keys and data made
here; its request and response types must match the service's OpenAPI document; the folder of
a fresh clone and the packed tarball must install into an empty project and work there; and
the docs' examples compile under `strict` against the installed package and both SDKs."""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from core.redis_client import redis_client
from registry.services import bundle_create, label_move, version_publish
from tests.conftest import content, make_api, pinned_body
from tests.live import ROOT, WebServer, registry_server  # noqa: F401 (fixture)

PACKAGE = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")

NO_NODE = "node and npm are not installed: the TypeScript client's tests need Node 20 (or newer) and npm"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module", autouse=True)
def node_and_npm() -> None:
    """Without Node and npm these tests skip on a developer's machine, and fail in CI (CI set,
    as CI services set it): there a missing Node must not pass as a green run."""
    if NODE is None or NPM is None:
        if _in_ci():
            pytest.fail(f"{NO_NODE} (CI is set, so this fails instead of skipping)", pytrace=False)
        pytest.skip(NO_NODE)


def _run(args: list[str], *, cwd: Path, timeout: float = 300, env: dict[str, str] | None = None):
    result = subprocess.run(
        args, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-6000:]}\n{result.stderr[-6000:]}"
    return result


def installed() -> None:
    """node_modules from the lockfile (npm ci, when missing or older than the lockfile; a fresh
    clone in CI installs itself)."""
    marker = PACKAGE / "node_modules" / ".package-lock.json"
    lock = PACKAGE / "package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        _run([NPM, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE)


@pytest.fixture(scope="module")
def built() -> Path:
    """node_modules installed, then the package and its tests compiled with tsc."""
    installed()
    _run([NODE, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json"], cwd=PACKAGE)
    return PACKAGE / "build"


def test_the_committed_openapi_document_is_the_services():
    """clients/typescript/openapi.json is what the service describes now (`make ts-types`
    regenerates it and the types)."""
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.renderers import OpenApiJsonRenderer

    schema = SchemaGenerator().get_schema(request=None, public=True)
    now = json.loads(OpenApiJsonRenderer().render(schema, renderer_context={}))
    committed = json.loads((PACKAGE / "openapi.json").read_text())
    assert committed == now, "the OpenAPI document changed: run `make ts-types` and commit the result"


def test_the_generated_types_are_those_of_the_committed_document(built, tmp_path):
    fresh = tmp_path / "openapi.ts"
    _run([NODE, "node_modules/openapi-typescript/bin/cli.js", "openapi.json", "-o", str(fresh)], cwd=PACKAGE)
    committed = (PACKAGE / "src" / "openapi.ts").read_text()
    assert fresh.read_text() == committed, "src/openapi.ts is stale: run `make ts-types` and commit the result"


def test_the_readme_sdk_examples_type_check_against_both_sdks_which_stay_optional(built):
    """The README's Anthropic and OpenAI loops compile, no cast, against the SDKs' own types
    (devDependencies here); for a user the SDKs are optional peers, and the published
    declarations import neither."""
    package = json.loads((PACKAGE / "package.json").read_text())
    for sdk in ("@anthropic-ai/sdk", "openai"):
        assert package["peerDependenciesMeta"][sdk] == {"optional": True} and sdk in package["peerDependencies"]
        assert sdk not in package.get("dependencies", {})
    for declarations in (built / "src").glob("*.d.ts"):
        assert not re.search(r"from [\"'](@anthropic-ai/sdk|openai)", declarations.read_text()), declarations
    readme = (PACKAGE / "README.md").read_text()
    section = readme.split("## With the Anthropic or OpenAI SDK", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```ts\n(.*?)^```", section, re.M | re.S)
    assert len(blocks) == 2 and "@anthropic-ai/sdk" in blocks[0] and '"openai"' in blocks[1]
    assert not any(re.search(r"\bas any\b|: any\b", block) for block in blocks)
    check = built / "readme-check"  # inside the package, so the SDKs resolve from its node_modules
    shutil.rmtree(check, ignore_errors=True)
    check.mkdir()
    names = []
    for i, block in enumerate(blocks):
        names.append(f"example{i}.ts")
        (check / names[-1]).write_text(block.replace('from "promptreg"', 'from "../../src/index.js"'))
    config = {"extends": "../../tsconfig.json", "compilerOptions": {"noEmit": True, "rootDir": "../.."}, "files": names}
    (check / "tsconfig.json").write_text(json.dumps(config))
    _run([NODE, "node_modules/typescript/bin/tsc", "-p", str(check / "tsconfig.json")], cwd=PACKAGE)


def test_the_committed_dist_is_what_the_sources_compile_to(built, tmp_path):
    """dist/ is committed, so that `npm install <checkout>/clients/typescript` works on a fresh
    clone: npm links a folder dependency and runs no build that could work there (its
    `prepare` would run without the package's devDependencies, so without tsc). `npm run build`
    rewrites it; this fails while it is stale."""
    out = tmp_path / "dist"
    _run([NODE, "node_modules/typescript/bin/tsc", "-p", "tsconfig.dist.json", "--outDir", str(out)], cwd=PACKAGE)
    fresh = {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    committed = {
        p.relative_to(PACKAGE / "dist").as_posix(): p.read_bytes() for p in (PACKAGE / "dist").rglob("*") if p.is_file()
    }
    assert sorted(committed) == sorted(fresh), "dist/ lists other files: run `npm run build` and commit dist/"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"dist/ is stale ({', '.join(stale)}): run `npm run build` in clients/typescript and commit dist/"


def _fresh_clone(into: Path) -> Path:
    """clients/typescript as a fresh clone of this checkout has it: the files git tracks (no
    node_modules, no build/), with their contents in the working tree."""
    listed = _run(["git", "ls-files", "-z", "clients/typescript"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, listed):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, target)
    return into / "clients" / "typescript"


def _docs_typescript_blocks() -> list[str]:
    docs = (ROOT / "docs" / "client.md").read_text()
    section = docs.split("\n## TypeScript\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```ts\n(.*?)^```", section, re.M | re.S)


def test_the_folder_of_a_fresh_clone_installs_and_the_docs_examples_compile_under_strict(built, tmp_path):
    """The documented `npm install <checkout>/clients/typescript` into an empty project on a fresh
    clone gives an importable `promptreg`; docs/client.md's TypeScript examples compile, as
    written, under `strict` in that project against the SDKs: `turn.request` is typed per format,
    so `anthropic.messages.create(turn.request)` (and `chat.completions.create`,
    `responses.create`) take it with no cast."""
    package = _fresh_clone(tmp_path / "clone")
    project = tmp_path / "agent"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "agent", "private": True, "type": "module"}))
    # No runtime dependencies: installing the folder needs no registry.
    _run([NPM, "install", "--offline", "--no-audit", "--no-fund", str(package)], cwd=project)
    probe = (
        "import * as p from 'promptreg'; console.log(typeof p.Registry, typeof p.stepAnthropic, p.TURN_FORMATS.length)"
    )
    out = _run([NODE, "--input-type=module", "-e", probe], cwd=project)
    assert out.stdout.split() == ["function", "function", "5"], out.stdout + out.stderr

    # A reader would `npm install @anthropic-ai/sdk openai ai @ai-sdk/anthropic @types/node
    # typescript`; offline here, the project links the copies the package's own lockfile
    # installed (the same versions).
    for dependency in ("@anthropic-ai/sdk", "openai", "ai", "@ai-sdk/anthropic", "@types/node"):
        link = project / "node_modules" / dependency
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(PACKAGE / "node_modules" / dependency, target_is_directory=True)
    blocks = _docs_typescript_blocks()
    assert len(blocks) >= 3 and all('from "promptreg"' in block for block in blocks)
    assert not any(re.search(r"\bas any\b|: any\b|@ts-", block) for block in blocks)
    names = []
    for i, block in enumerate(blocks):
        names.append(f"example{i}.ts")
        (project / names[-1]).write_text(block)
    config = {
        "compilerOptions": {
            "strict": True,
            "target": "ES2022",
            "module": "NodeNext",
            "moduleResolution": "NodeNext",
            "lib": ["ES2022", "ESNext.Disposable", "DOM"],
            "types": ["node"],
            "skipLibCheck": True,
            "noEmit": True,
        },
        "files": names,
    }
    (project / "tsconfig.json").write_text(json.dumps(config))
    _run([NODE, str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "tsconfig.json"], cwd=project)


@pytest.fixture(scope="module")
def throttled_server(django_db_setup, django_db_blocker) -> Iterator[WebServer]:
    # A day's window, so the test's three calls and the refused fourth share one. Windows are
    # aligned to the epoch (midnight UTC): too close to midnight, wait for the new day, else the
    # fourth call lands in a fresh window or is told to retry in seconds.
    left = 86_400 - int(time.time()) % 86_400
    if left < 300:
        time.sleep(left + 1)
    server = WebServer(env={"API_THROTTLE_READ": "3/d"})
    server.start()
    yield server
    server.stop()


@pytest.fixture
def data(ops):
    bundle = bundle_create(name="refunds", description="Refund agent", actor=ops.actor)
    v1 = version_publish(bundle=bundle, content=content(), message="v1", actor=ops.actor).version
    version_publish(bundle=bundle, content=content("Version two."), message="v2", actor=ops.actor)
    label_move(bundle=bundle, name="production", version=v1, actor=ops.actor, reason="first release")
    return v1


@pytest.mark.django_db(transaction=True)
def test_the_node_suite_against_a_live_registry(built, registry_server, throttled_server, agent, ops, data):  # noqa: F811
    throttled = make_api("agent", name="ts-throttled")
    store = redis_client(settings.REDIS_URL)  # key ids repeat across test databases
    for name in store.scan_iter(f"registry:rl:*:{throttled.actor.api_key_id}:*"):
        store.delete(name)
    env = {
        "PROMPTREG_URL": registry_server.url,
        "PROMPTREG_AGENT_KEY": agent.secret,
        "PROMPTREG_OPS_KEY": ops.secret,
        "PROMPTREG_THROTTLED_URL": throttled_server.url,
        "PROMPTREG_THROTTLED_KEY": throttled.secret,
        "PROMPTREG_CLOSED_URL": WebServer().url,  # a free port nothing listens on
        "PROMPTREG_V1_BODY": pinned_body(data).decode(),
    }
    tests = sorted(str(p) for p in (built / "test").glob("*.test.js"))
    result = subprocess.run(
        [NODE, "--test", "--test-reporter=spec", *tests],
        cwd=PACKAGE,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-4000:]
    summary = dict(re.findall(r"^ℹ (tests|pass|fail|skipped|todo|cancelled) (\d+)$", result.stdout, re.M))
    # Every test runs: none is skipped (the one-call turn included), none is left as todo.
    assert int(summary["tests"]) >= 14 and int(summary["tests"]) == int(summary["pass"]), result.stdout[-4000:]
    assert summary.get("skipped", "0") == "0" and summary.get("todo", "0") == "0", result.stdout[-4000:]


@pytest.mark.django_db(transaction=True)
def test_the_packed_tarball_installs_into_an_empty_project_and_works(built, registry_server, agent, data):  # noqa: F811
    with tempfile.TemporaryDirectory() as work:
        packed = _run([NPM, "pack", "--json", "--pack-destination", work], cwd=PACKAGE)
        tarball = Path(work) / json.loads(packed.stdout)[0]["filename"]
        files = {entry["path"] for entry in json.loads(packed.stdout)[0]["files"]}
        assert "dist/index.d.ts" in files and not any(f.startswith(("test/", "build/")) for f in files)
        project = Path(work) / "agent"
        project.mkdir()
        (project / "package.json").write_text(json.dumps({"name": "agent", "private": True, "type": "module"}))
        # No runtime dependencies: installing the tarball needs no registry.
        _run([NPM, "install", "--offline", "--no-audit", "--no-fund", str(tarball)], cwd=project)
        (project / "agent.mjs").write_text(
            "import { Registry, NotFound } from 'promptreg';\n"
            "const registry = new Registry(process.env.URL, process.env.KEY);\n"
            "await using session = await registry.startSession('refunds');\n"
            "const bundle = await session.bundle();\n"
            "console.log(JSON.stringify({ version: session.version, hash: bundle.contentHash,"
            " notFound: NotFound.name }));\n"
        )
        # `await using` in plain JavaScript is newer than Node 20: a compiled caller's syntax, so
        # the script uses the explicit form when the runtime lacks it.
        script = project / "agent.mjs"
        text = script.read_text()
        probe = subprocess.run([NODE, "--check", str(script)], capture_output=True, text=True)
        if probe.returncode != 0:
            text = text.replace("await using session", "const session") + "await session.end();\n"
            script.write_text(text)
        out = _run([NODE, str(script)], cwd=project, env={"URL": registry_server.url, "KEY": agent.secret})
        assert json.loads(out.stdout.strip().splitlines()[-1]) == {
            "version": 1,
            "hash": data.content_hash,
            "notFound": "NotFound",
        }


def _readme_block(marker: str) -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- readme-test: {marker} -->\n```\w*\n(.*?)^```", readme, re.M | re.S)
    assert found, f"README.md has no block {marker}"
    return found.group(1)


@pytest.mark.django_db(transaction=True)
def test_the_readme_typescript_agent_loop_runs_from_the_installed_tarball(built, registry_server, agent, data):  # noqa: F811
    """The README's TypeScript loop, as a reader pastes it into a project that installed the package."""
    with tempfile.TemporaryDirectory() as work:
        packed = _run([NPM, "pack", "--json", "--pack-destination", work], cwd=PACKAGE)
        tarball = Path(work) / json.loads(packed.stdout)[0]["filename"]
        project = Path(work) / "agent"
        project.mkdir()
        (project / "package.json").write_text(json.dumps({"name": "agent", "private": True, "type": "module"}))
        _run([NPM, "install", "--offline", "--no-audit", "--no-fund", str(tarball)], cwd=project)
        (project / "loop.mjs").write_text(_readme_block("agent-loop-ts"))
        env = {"REGISTRY_URL": registry_server.url, "AGENT_KEY": agent.secret, "NAME": "refunds"}
        out = _run([NODE, str(project / "loop.mjs")], cwd=project, env=env)
        # The stand-in model saw production's (v1) tools, once: one turn, one call.
        assert out.stdout.strip().splitlines() == ["[ 'process_refund' ]"], out.stdout + out.stderr


RESTART_SCRIPT = """
import { Registry } from "./src/index.js";
import { createInterface } from "node:readline";
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const registry = new Registry(process.env.URL, process.env.KEY, { retry: { deadline: 60, maximum: 0.5 } });
const session = await registry.startSession("refunds");
const pinned = await session.bundle();
console.log("started");
await lines.next(); // the server is down now
const began = performance.now();
await session.heartbeat(); // refused until the server is back, then it works
const waited = (performance.now() - began) / 1000;
const again = await session.refresh(); // a 304: the bytes are still those pinned
await session.end();
console.log(JSON.stringify({ waited, same: again === pinned, ended: session.ended }));
process.exit(0);
"""


@pytest.mark.django_db(transaction=True)
def test_it_retries_across_a_server_restart(built, agent, data):
    server = WebServer()
    server.start()
    script = PACKAGE / "build" / "restart-check.mjs"
    script.write_text(RESTART_SCRIPT)
    proc = subprocess.Popen(
        [NODE, str(script)],
        cwd=PACKAGE,
        env={**os.environ, "URL": server.url, "KEY": agent.secret},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "started", proc.stderr.read() if proc.stderr else ""
        server.stop()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        time.sleep(1.0)
        server.start()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert result["waited"] >= 0.9 and result["same"] and result["ended"], result
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()


def _gemini_and_bedrock(fmt: str, body: dict, n: int):
    from devtools.provider_standin import Call, Reply

    # Each format's first call asks for process_refund (a thought signature on Gemini's), then text.
    if n in (0, 2):
        return Reply(calls=[Call("process_refund", {"order_id": "7"})], reasoning=True)
    return Reply(text="Refunded.")


@pytest.mark.django_db(transaction=True)
def test_the_gemini_and_bedrock_step_helpers_run_a_loop_against_the_stand_in(registry_server, agent, data):  # noqa: F811
    """stepGemini and stepBedrockConverse (test/step-formats.mjs, on the committed dist/): the
    turn's request sent, the reply appended whole, each call answered in the format's shape."""
    from devtools.provider_standin import StandIn

    installed()
    with StandIn(_gemini_and_bedrock) as provider:
        env = {"REGISTRY_URL": registry_server.url, "AGENT_KEY": agent.secret, "PROVIDER_URL": provider.url}
        out = _run([NODE, str(PACKAGE / "test" / "step-formats.mjs")], cwd=PACKAGE, env=env)
    assert [(r.path, r.problems) for r in provider.refused] == [] and len(provider.received) == 4
    steps = json.loads(out.stdout.strip().splitlines()[-1])
    for fmt in ("gemini", "bedrock-converse"):
        assert [s["text"] for s in steps[fmt]] == ["", "Refunded."], steps
        assert [c["name"] for c in steps[fmt][0]["calls"]] == ["process_refund"]
    gemini_answer = provider.received[1].body["contents"]
    call, answer = gemini_answer[1], gemini_answer[2]
    assert call["role"] == "model" and call["parts"][0]["thoughtSignature"]  # the reply kept whole
    response = answer["parts"][0]["functionResponse"]
    assert (response["id"], response["name"]) == ("fc_0_0", "process_refund")
    assert response["response"] == {"result": "refunded 7"}
    result = provider.received[3].body["messages"][2]["content"][0]["toolResult"]
    assert (result["toolUseId"], result["content"]) == ("tooluse_0_2", [{"text": "refunded 7"}])
