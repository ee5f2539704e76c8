"""The REST views, one module per subject (bundles, versions, labels, releases, changes,
sessions, skills, knowledge, evidence, checks, evals, models, tools, transfer, webhooks, audit,
shell, and the front door `index`). Each module holds its subject's serializers (In and Out
schemas) and then its views; what several subjects share is api.common. The per-turn calls
are the route table's (api/routes.py)."""
