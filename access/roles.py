"""The roles of API keys and people, in rank order. A plain module (no models), so that the
Actor, the groups and the models can all import it without a cycle."""

from django.db import models


class Role(models.TextChoices):
    # Ordered: each role includes the ones before it (ROLE_RANK below).
    AGENT = "agent"
    PUBLISHER = "publisher"
    OPS = "ops"
    ADMIN = "admin"
    # Outside the ladder: a CI pipeline's key, which may only report checks of versions (and
    # read them). Ranked below agent, so every other role check refuses it; the check services
    # name it explicitly (registry.services.check_report).
    CI = "ci"


ROLE_RANK = {Role.CI: -1, Role.AGENT: 0, Role.PUBLISHER: 1, Role.OPS: 2, Role.ADMIN: 3}
