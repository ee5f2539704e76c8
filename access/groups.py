"""The names of the groups people in the admin belong to, and the role each one gives.

Defined once: access.actors.actor_for_user derives a person's role from them, and
adminui.groups gives each its model permissions."""

from access.roles import Role

PROMPT_ENGINEERS = "Prompt engineers"
OPS = "Ops"

# Strongest first: a person in both groups gets the first role that matches.
ROLE_OF_GROUP: dict[str, str] = {OPS: Role.OPS, PROMPT_ENGINEERS: Role.PUBLISHER}
