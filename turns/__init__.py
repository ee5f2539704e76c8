"""The turn: what the model sees each turn, composed from the feature apps (docs/architecture.md#the-turn).

- request: the turn call's fields checked, the conversation read into the neutral shape;
- compose: the steps (prepare, session_steps, lay_out) and the turn call's answer;
- preview: the first turn of a new session, for the admin's version page;
- layout: the per-turn text and the provider request;
- providers, provider_messages, provider_input: each provider's request, conversation and input shapes.

Between the entry points (api, adminui, mcp_server), which call it, and the feature apps
(knowledge, skills, evidence, ...), which it composes; nothing below it imports it."""
