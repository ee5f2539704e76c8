"""Run with the MLflow virtualenv's python (tests/mlflow_server.py): writes prompts into the
tracking server at argv[1] through MLflow's own API, as a team using MLflow would.

    first   summarizer v1 (text), v2 (chat, model config), v3 (text, response format);
            aliases production -> 2, staging -> 3; greeter v1
    second  summarizer v4; production -> 4
"""

import sys

import mlflow

mlflow.set_tracking_uri(sys.argv[1])
prompts = mlflow.genai

if sys.argv[2] == "first":
    prompts.register_prompt(
        name="summarizer", template="Summarize {{ text }} in {{ words }} words.", commit_message="first cut"
    )
    prompts.register_prompt(
        name="summarizer",
        template=[
            {"role": "system", "content": "You summarize {{ topic }} articles."},
            {"role": "user", "content": "{{ text }}"},
        ],
        commit_message="chat, with a system message",
        model_config={"model_name": "gpt-6-luna", "temperature": 0.1, "max_tokens": 200},
    )
    prompts.register_prompt(
        name="summarizer",
        template="Summarize {{ text }} in {{ words }} words, as JSON.",
        commit_message="structured output",
        response_format={"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    )
    prompts.set_prompt_alias("summarizer", alias="production", version=2)
    prompts.set_prompt_alias("summarizer", alias="staging", version=3)
    prompts.register_prompt(name="greeter", template="Greet {{ name }}.", commit_message="hello")
else:
    prompts.register_prompt(
        name="summarizer", template="Summarize {{ text }} in at most {{ words }} words.", commit_message="at most"
    )
    prompts.set_prompt_alias("summarizer", alias="production", version=4)
