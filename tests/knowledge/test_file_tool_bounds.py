"""The file tools' parameters at their worst values (issue 18): every grep pattern, glob, path and
offset is bounded before any work, refused with a 400 in the contract's shape when it breaks a
bound, and what is accepted answers within its time limit (RE2: no backtracking, a compile that
cannot allocate gigabytes). The first tests time out or allocate gigabytes on the code before."""

import time

import pytest

from access.models import Role
from tests.conftest import content, make_api
from tests.knowledge.test_knowledge import World

# A counted-repeat bomb: `regex.compile` allocated over 1.4 GB for it before its time limit applied.
COMPILE_BOMB = "(?:a{60000}){60000}"
NESTED_BOMB = "((a{100}){100}){100}"  # 13 s of CPU to compile with `regex`


@pytest.fixture
def world(db) -> World:
    return World()


def _refused(response, *, needle: str) -> str:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"} and error["code"] == "validation_error"
    assert needle in error["message"], error["message"]
    assert "pattern" in error["details"] or "offset" in error["details"] or "limit" in error["details"]
    return error["message"]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        (COMPILE_BOMB, "at most 1000"),
        (NESTED_BOMB, "at most 1000"),
        ("x" * 1001, "at most 1000"),
        ("(" * 17 + "a" + ")" * 17, "nests groups 17 deep"),
        ("a{2}" * 21, "21 counted repeats"),
        ("(?s)[a-h](?:.{0,5}[a-h]){200}x", "too large to run"),
        (r"(a)\1", "backreferences"),
        ("(?P<x>a)(?P=x)", "backreferences"),
        ("foo(?=bar)", "lookahead"),
        ("(?<!x)foo", "lookbehind"),
        ("(unclosed", "not a valid regular expression"),
    ],
)
def test_grep_refuses_what_it_cannot_run_in_linear_time_with_a_clear_400(world, pattern, needle):
    began = time.monotonic()
    _refused(world.tool("grep", pattern=pattern), needle=needle)
    assert time.monotonic() - began < 1


@pytest.mark.timeout(20)
def test_grep_in_a_session_without_packs_compiles_nothing(db):
    ops = make_api(Role.OPS, name="np-ops")
    agent = make_api(Role.AGENT, name="np-agent")
    ops.post("/api/v1/bundles/", {"name": "plain"})
    assert ops.post("/api/v1/bundles/plain/versions/", {"content": content("Hi."), "message": "v1"}).status_code == 201
    session = agent.post("/api/v1/sessions/", {"bundle": "plain", "version": 1}).json()["id"]
    began = time.monotonic()
    response = agent.get(f"/api/v1/sessions/{session}/knowledge/grep", data={"pattern": NESTED_BOMB})
    assert response.status_code == 200, response.content
    assert response.json()["output"] == "(no knowledge files)"
    assert time.monotonic() - began < 1
    glob = agent.get(f"/api/v1/sessions/{session}/knowledge/glob", data={"pattern": "knowledge/**/*.md"})
    assert glob.json()["output"] == "(no files match)"


@pytest.mark.timeout(30)
def test_grep_runs_catastrophic_backtracking_patterns_in_linear_time(world):
    world.put("ops", "evil.txt", "a" * 100_000 + "!\n" + "ok aaaa\n")
    began = time.monotonic()
    # (a|aa)+$ and (a+)+$ backtrack exponentially in Python's engines; RE2 does not backtrack.
    assert world.output("grep", pattern="(a|aa)+$", path="knowledge/ops/evil.txt") == "knowledge/ops/evil.txt:2:ok aaaa"
    assert world.output("grep", pattern="(a+)+$", path="knowledge/ops/evil.txt") == "knowledge/ops/evil.txt:2:ok aaaa"
    assert time.monotonic() - began < 2
    # Python's \Z still means the end of the text; (?i) and multi-line mode keep working.
    assert world.output("grep", pattern=r"(?i)OK a+\n\Z", path="knowledge/ops/evil.txt") == (
        "knowledge/ops/evil.txt:2:ok aaaa"
    )


@pytest.mark.timeout(30)
def test_grep_numbers_lines_across_blocks_and_non_ascii_text(world):
    lines = [f"ligne {i} é {'x' * 100}" for i in range(1, 2001)]  # about 230 KB: several 64 KB blocks
    world.put("ops", "fr.txt", "\n".join(lines) + "\n")
    found = world.output("grep", pattern=r"^ligne (?:1|999|2000) ", path="knowledge/ops/fr.txt").splitlines()
    assert found == [f"knowledge/ops/fr.txt:{i}:{lines[i - 1]}" for i in (1, 999, 2000)]


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    ("pattern", "needle"),
    [
        ("knowledge/" + "a" * 1020, "at most 1024"),
        ("knowledge/" + "*a" * 33, "33 wildcards"),
        ("knowledge/" + "**/" * 9 + "*.md", "at most 32, 8 of them **"),
        ("knowledge/" + "a/" * 64 + "x", "66 folder levels"),
        ("knowledge/{" + ",".join(f"n{i}" for i in range(70)) + "}", "choices"),
        ("knowledge/[[:bogus:]]", "not a valid regular expression"),
    ],
)
def test_glob_refuses_patterns_past_its_bounds(world, pattern, needle):
    _refused(world.tool("glob", pattern=pattern), needle=needle)


@pytest.mark.timeout(20)
def test_glob_at_its_worst_accepted_values_answers_in_time_and_completely(world):
    world.put("ops", "a" * 200 + ".md", "x")
    # 32 wildcards over a 200-letter name: polynomial backtracking for a regex engine that
    # backtracks, linear for RE2.
    pattern = "knowledge/ops/" + "*a" * 31 + "*.md"
    began = time.monotonic()
    assert world.output("glob", pattern=pattern) == "knowledge/ops/" + "a" * 200 + ".md"
    assert world.output("glob", pattern="knowledge/ops/" + "*a" * 31 + "*.txt") == "(no files match)"
    assert time.monotonic() - began < 1


@pytest.mark.parametrize("value", ["1" * 10, "99999999999999999999999999", "-5", "1e3", "x"])
def test_offsets_and_limits_are_whole_numbers_of_at_most_nine_digits(world, value):
    _refused(world.tool("ls", path="knowledge/", offset=value), needle="whole number from 1 to 999999999")
    _refused(world.tool("read", path="knowledge/ops/README.md", limit=value), needle="whole number")


def test_ls_and_read_at_their_largest_accepted_values(world):
    deepest = "knowledge/ops/" + "/".join(["d" * 50] * 10)  # 509 bytes below the pack
    response = world.tool("ls", path=deepest + "/", offset="999999999")
    assert response.status_code == 404, response.content  # checked, then not found
    assert "past the end" in world.output("ls", path="knowledge/ops/", offset="999999999")
    assert "past the end" in world.output("read", path="knowledge/ops/README.md", offset="999999999", limit="999999999")
    assert world.tool("ls", path="knowledge/ops/" + "d/" * 400).status_code == 400  # over 512 bytes
