"""Sending a turn call's `request` to a model provider with its official SDK, and reading the
reply back in the neutral shape the scorers read (evals.scorers):

    {"text": str, "tool_calls": [{"name", "arguments"}], "usage": {"input_tokens",
     "output_tokens", "cached_tokens"}}

One module for both runners: the registry's worker and playground (evals/, api/, adminui/) and
`promptreg eval run` (the client ships a byte-identical copy, client/promptreg/provider_calls.py,
so it stays installable alone; tests/test_client_copies.py compares them). Standard library at
the top; each SDK is imported only by the function that uses it, so a runner needs only the SDK
of the provider it calls.

`api_key` None: the SDK reads its own environment variable (ANTHROPIC_API_KEY, OPENAI_API_KEY,
GEMINI_API_KEY; Bedrock always reads the AWS credentials chain)."""

import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

# The turn call's formats these functions send.
FORMATS = ("anthropic", "openai-chat", "openai-responses", "bedrock-converse", "gemini")
JUDGE_INSTRUCTIONS = (
    "Judge the assistant's reply below. Answer with one JSON object and nothing else: "
    '{"score": a number from 0 to 1, "reason": one sentence}.'
)


def _usage(obj: Any, *names: str) -> int:
    for name in names:
        value = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if isinstance(value, int):
            return value
    return 0


def _arguments(text: Any) -> Any:
    try:
        return json.loads(text or "{}")
    except ValueError:
        return text


def _anthropic(request: dict[str, Any], base_url: Any, timeout: float, api_key: Any) -> dict[str, Any]:
    import anthropic

    client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
    reply = client.messages.create(**request)
    usage = reply.usage
    return {
        "text": "".join(b.text for b in reply.content if b.type == "text"),
        "tool_calls": [{"name": b.name, "arguments": b.input} for b in reply.content if b.type == "tool_use"],
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cached_tokens": _usage(usage, "cache_read_input_tokens"),
        },
    }


def _openai_chat(request: dict[str, Any], base_url: Any, timeout: float, api_key: Any) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
    reply = client.chat.completions.create(**request)
    message = reply.choices[0].message
    usage = reply.usage
    details = getattr(usage, "prompt_tokens_details", None)
    return {
        "text": message.content or "",
        "tool_calls": [
            {"name": c.function.name, "arguments": _arguments(c.function.arguments)}
            for c in message.tool_calls or []
            if getattr(c, "function", None) is not None
        ],
        "usage": {
            "input_tokens": _usage(usage, "prompt_tokens"),
            "output_tokens": _usage(usage, "completion_tokens"),
            "cached_tokens": _usage(details, "cached_tokens"),
        },
    }


def _openai_responses(request: dict[str, Any], base_url: Any, timeout: float, api_key: Any) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
    reply = client.responses.create(**request)
    calls = [i for i in reply.output if i.type == "function_call"]
    details = getattr(reply.usage, "input_tokens_details", None)
    return {
        "text": reply.output_text or "",
        "tool_calls": [{"name": c.name, "arguments": _arguments(c.arguments)} for c in calls],
        "usage": {
            "input_tokens": _usage(reply.usage, "input_tokens"),
            "output_tokens": _usage(reply.usage, "output_tokens"),
            "cached_tokens": _usage(details, "cached_tokens"),
        },
    }


def _bedrock(request: dict[str, Any], base_url: Any, timeout: float, api_key: Any) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=base_url,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(read_timeout=timeout, retries={"max_attempts": 1}),
    )
    reply = client.converse(**request)
    content = reply["output"]["message"]["content"]
    usage = reply.get("usage", {})
    return {
        "text": "".join(block.get("text", "") for block in content),
        "tool_calls": [
            {"name": b["toolUse"]["name"], "arguments": b["toolUse"]["input"]} for b in content if "toolUse" in b
        ],
        "usage": {
            "input_tokens": _usage(usage, "inputTokens"),
            "output_tokens": _usage(usage, "outputTokens"),
            "cached_tokens": _usage(usage, "cacheReadInputTokens"),
        },
    }


def _gemini(request: dict[str, Any], base_url: Any, timeout: float, api_key: Any) -> dict[str, Any]:
    from google import genai
    from google.genai import types

    options = types.HttpOptions(base_url=base_url, timeout=int(timeout * 1000)) if base_url else None
    client = genai.Client(api_key=api_key, http_options=options)
    config: Any = {**request.get("generationConfig", {}), "systemInstruction": request.get("systemInstruction")}
    if "tools" in request:
        config["tools"] = request["tools"]
    reply = client.models.generate_content(model=request["model"], contents=request["contents"], config=config)
    parts = (reply.candidates[0].content.parts or []) if reply.candidates and reply.candidates[0].content else []
    usage = reply.usage_metadata
    return {
        "text": "".join(p.text or "" for p in parts if not p.function_call),
        "tool_calls": [
            {"name": p.function_call.name, "arguments": p.function_call.args} for p in parts if p.function_call
        ],
        "usage": {
            "input_tokens": getattr(usage, "prompt_token_count", 0) or 0,
            "output_tokens": getattr(usage, "candidates_token_count", 0) or 0,
            "cached_tokens": getattr(usage, "cached_content_token_count", 0) or 0,
        },
    }


# By the turn call's format.
CALLERS: dict[str, Callable[[dict[str, Any], Any, float, Any], dict[str, Any]]] = {
    "anthropic": _anthropic,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "bedrock-converse": _bedrock,
    "gemini": _gemini,
}


def with_model(fmt: str, request: dict[str, Any], model: Any) -> dict[str, Any]:
    """`request` naming `model` instead of the version's (Bedrock names it `modelId`)."""
    if not model:
        return request
    return {**request, ("modelId" if fmt == "bedrock-converse" else "model"): model}


def request_sha256(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def judge_question(messages: list[dict[str, Any]], reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The one user message a judge bundle is asked: the conversation and the reply to judge."""
    shown = json.dumps({"conversation": messages, "reply": reply["text"], "tool_calls": reply["tool_calls"]})
    return [{"role": "user", "content": f"{JUDGE_INSTRUCTIONS}\n\n{shown}"}]


def judge_verdict(text: str) -> dict[str, Any]:
    """The judge's answer as {score, reason}; score None when it was not that."""
    try:
        parsed = json.loads(text.strip().removeprefix("```json").removesuffix("```"))
        return {"score": float(parsed["score"]), "reason": str(parsed.get("reason", ""))[:500]}
    except (ValueError, KeyError, TypeError):
        return {"score": None, "reason": "the judge's answer was not {score, reason}"}
