"""What an agent pays per task through the client and through MCP, against a running registry:

    .venv/bin/python bench/agent_calls.py --url http://127.0.0.1:8000 \
        --ops-key $OPS_KEY --agent-key $AGENT_KEY [--tasks 200]

Publishes a bundle `bench-agent-<time>` (a ~10 KB document, production label), then runs
`--tasks` sequential tasks each way and prints p50/p99 per step:

- client: `start_session` (POST start + GET bundle, a 304 once the hash is known), `render()`,
  `end()`; and the bytes of bundle bodies received (the content-hash cache makes it one body);
- MCP over streamable HTTP (the `mcp` client): `list_capabilities`, `get_capability_protocol`,
  `end_session`.

Sequential on purpose: latency per step, not throughput (that is `make bench`). Bounded by
`--tasks`; aims only at the URL given; leaves the bundle and its ended sessions behind."""

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import httpx
import httpx2

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "client")]

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from promptreg import Registry  # noqa: E402

from bench.pinned_fetch import content_document  # noqa: E402


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--ops-key", required=True)
    parser.add_argument("--agent-key", required=True)
    parser.add_argument("--tasks", type=int, default=200)
    args = parser.parse_args()
    bundle = f"bench-agent-{int(time.time())}"

    with Registry(args.url, args.ops_key) as ops:
        ops.create_bundle(bundle, description="agent-calls benchmark", when_to_use="benchmark only")
        version, _ = ops.publish(bundle, content_document(), message="bench")
        ops.move_label(bundle, "production", version=version["number"], reason="bench")

    timings: dict[str, list[float]] = defaultdict(list)
    bodies = 0

    def body_bytes(response: httpx.Response) -> None:
        nonlocal bodies
        if response.request.url.path.endswith("/bundle/") and response.status_code == 200:
            response.read()
            bodies += len(response.content)

    with Registry(args.url, args.agent_key) as agent:
        agent._http.event_hooks["response"].append(body_bytes)
        for _ in range(args.tasks):
            began = time.perf_counter()
            session = agent.start_session(bundle)
            timings["client start_session (+ bundle)"].append(time.perf_counter() - began)
            began = time.perf_counter()
            session.render()
            timings["client render"].append(time.perf_counter() - began)
            began = time.perf_counter()
            session.end()
            timings["client end"].append(time.perf_counter() - began)

    async def over_mcp() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {args.agent_key}"}, timeout=30)
        async with Client(streamable_http_client(f"{args.url}/mcp", http_client=http)) as client:
            for _ in range(args.tasks):
                for step, arguments in (("list_capabilities", {}), ("get_capability_protocol", {"capability": bundle})):
                    began = time.perf_counter()
                    result = await client.call_tool(step, arguments)
                    timings[f"mcp {step}"].append(time.perf_counter() - began)
                    assert not result.is_error, result.content
                session_id = result.structured_content["session_id"]
                began = time.perf_counter()
                await client.call_tool("end_session", {"session_id": session_id})
                timings["mcp end_session"].append(time.perf_counter() - began)

    asyncio.run(over_mcp())
    print(f"{args.tasks} tasks each way against {args.url}, sequential")
    for step, samples in timings.items():
        print(f"  {step:<36} {percentiles(samples)}")
    print(f"  bundle bodies received by the client: {bodies} bytes over {args.tasks} sessions of one version")


if __name__ == "__main__":
    main()
