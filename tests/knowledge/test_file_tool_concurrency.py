"""One agent key may not hold every web thread with slow file-tool calls (issue 18): at most
FILE_TOOL_CONCURRENCY of its ls/glob/grep/read calls run at once, counted in Redis so that every
web process shares the count, and the next one is a 429 in the contract's shape with Retry-After.
Without Redis the slots are counted per process (the breaker's fallback)."""

import threading
import time

from django.test import override_settings

from access import ratelimit
from core import breaker
from tests.knowledge.test_knowledge import World
from tests.live import web_server


def _hold(world: World, n: int) -> list[ratelimit.Slot]:
    slots = [ratelimit.file_tool_slot(actor=world.agent.actor) for _ in range(n)]
    assert all(slots)
    return slots  # type: ignore[return-value]


def test_a_key_past_its_file_tool_slots_gets_429_with_retry_after_and_other_keys_do_not(db):
    world = World()
    held = _hold(world, 4)  # as four slow greps of this key would, in any process
    response = world.tool("grep", pattern="Restart")
    assert response.status_code == 429, response.content
    error = response.json()["error"]
    assert error["code"] == "throttled" and set(error) == {"code", "message", "details"}
    assert "4 file-tool calls running" in error["message"]
    assert response["Retry-After"] == "2"
    for tool, params in [("ls", {"path": "knowledge/"}), ("glob", {"pattern": "**/*.md"})]:
        assert world.tool(tool, **params).status_code == 429
    other = ratelimit.file_tool_slot(actor=world.ops.actor)  # another key has its own slots
    assert other is not None
    other.release()
    held.pop().release()
    assert world.tool("grep", pattern="Restart").status_code == 200  # a slot is free again
    assert world.tool("grep", pattern="Restart").status_code == 200  # and given back after each call
    for slot in held:
        slot.release()


def test_a_slot_whose_holder_died_lapses(db):
    world = World()
    with override_settings(FILE_TOOL_SLOT_SECONDS=1):
        _hold(world, 4)  # never released
        assert world.tool("ls", path="knowledge/").status_code == 429
        time.sleep(1.1)
        assert world.tool("ls", path="knowledge/").status_code == 200


def test_without_redis_the_slots_are_counted_in_the_process(db):
    world = World()
    closed = "redis://127.0.0.1:1/0"
    with override_settings(REDIS_URL=closed, REDIS_REQUEST_TIMEOUT_MS=50):
        held = _hold(world, 4)
        assert all(slot.token is None for slot in held)
        assert world.tool("ls", path="knowledge/").status_code == 429
        for slot in held:
            slot.release()
        assert world.tool("ls", path="knowledge/").status_code == 200
    breaker.for_url(closed).succeeded()


def test_the_limit_holds_across_web_processes(transactional_db):
    world = World()
    # A live server (its own process): slots this test process holds in Redis count there too.
    with web_server() as base:
        import urllib.error
        import urllib.request

        def call() -> int:
            request = urllib.request.Request(
                f"{base}/api/v1/sessions/{world.session}/knowledge/ls?path=knowledge/",
                headers={"Authorization": f"Bearer {world.agent.secret}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    return answer.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert call() == 200
        held = _hold(world, 4)
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(call())) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == [429, 429, 429]
        for slot in held:
            slot.release()
        assert call() == 200
