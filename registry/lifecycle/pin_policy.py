"""Governance of what agents run, not only of what labels target: a session pinned by version
number (`POST /sessions/ {"version": N}`) may only pin a version that passes the strictest
policy of the bundle's labels, unless the bundle's ops granted "pin any version" to the
caller's role or key.

The policy is every label's own: a version passes when, for each label of the bundle that
requires checks or approvals, it passes that label's checks verdict and approvals verdict
(checks_verdict, approvals_verdict: the same functions a label move applies, with the same
exemption for a version the label targeted before). So a version that has never passed, or
been released through, the strictest label cannot be run by number, and a rollback target can.
A bundle whose labels require nothing is not governed, and any version may be pinned."""

from dataclasses import dataclass
from typing import Any

from access.actors import Actor
from access.roles import Role
from core.errors import Forbidden, InvalidContent
from registry.lifecycle.labels import approvals_verdict, checks_verdict
from registry.models import Bundle, BundleVersion, Label

# A grant names a role ("role:publisher") or a key ("key:NAME", the Actor's name of a key).
# Bounded: a list of a few test harnesses, not an access-control list.
PIN_GRANTS_MAX = 20
_ROLE_PREFIX = "role:"
_KEY_PREFIX = "key:"
_KEY_NAME_MAX = 200


class PinNotAllowed(Forbidden):
    """A pin by number of a version that has not passed the strictest policy of the bundle's
    labels; details: `version`, `content_hash`, `labels` ([{label, checks, approvals}], the
    verdicts that refused it)."""

    code = "pin_not_allowed"


@dataclass(frozen=True)
class PinVerdict:
    version: int
    content_hash: str
    refusals: list[dict[str, Any]]  # the governed labels whose verdict the version fails
    granted: str | None  # the grant that lets the caller pin it anyway

    @property
    def allowed(self) -> bool:
        return self.granted is not None or not self.refusals

    @property
    def reason(self) -> str:
        """Why the pin was allowed, as the audit record states it."""
        if self.refusals:
            return f"granted ({self.granted})"
        return "passes the labels' policy"


def grants_valid(grants: object) -> list[str]:
    """The bundle setting as stored: sorted, unique, each `role:ROLE` or `key:NAME` (400 otherwise)."""
    if not isinstance(grants, list) or len(grants) > PIN_GRANTS_MAX:
        raise InvalidContent(
            "pin_any_version is not valid.",
            {"pin_any_version": [f"A list of at most {PIN_GRANTS_MAX} grants, each role:ROLE or key:NAME."]},
        )
    errors: dict[str, list[str]] = {}
    for i, grant in enumerate(grants):
        ok = isinstance(grant, str) and (
            (grant.startswith(_ROLE_PREFIX) and grant.removeprefix(_ROLE_PREFIX) in Role.values)
            or (grant.startswith(_KEY_PREFIX) and 1 <= len(grant.removeprefix(_KEY_PREFIX)) <= _KEY_NAME_MAX)
        )
        if not ok:
            errors[f"pin_any_version[{i}]"] = [f"role:ROLE (one of {', '.join(Role.values)}) or key:NAME."]
    if errors:
        raise InvalidContent("pin_any_version is not valid.", errors)
    return sorted(set(grants))


def grant_of(*, bundle: Bundle, actor: Actor) -> str | None:
    """The bundle's grant that names `actor`'s role or key, if any. A key is named by the name
    its actor carries (`key:NAME`); a role grant names that role exactly (no ladder: granting
    `role:agent` does not grant ops). Read here: a session start holds the bundle's id and name
    only (registry.selectors.bundle_for_start, and the fast lane's read)."""
    grants: list[str] = Bundle.objects.filter(pk=bundle.pk).values_list("pin_any_version", flat=True).first() or []
    for grant in grants:
        if grant == f"{_ROLE_PREFIX}{actor.role}" or (actor.api_key_id is not None and grant == actor.name):
            return str(grant)
    return None


def pin_verdict(*, bundle: Bundle, version: BundleVersion, actor: Actor) -> PinVerdict:
    refusals: list[dict[str, Any]] = []
    governed = Label.objects.filter(bundle=bundle).exclude(required_checks=[], required_approvals=0).order_by("name")
    for label in governed:
        checks = checks_verdict(label=label, target=version)
        approvals = approvals_verdict(label=label, target=version)
        if not (checks.passes and approvals.passes):
            refusals.append({"label": label.name, "checks": checks.out(), "approvals": approvals.out()})
    granted = grant_of(bundle=bundle, actor=actor) if refusals else None
    return PinVerdict(version.number, version.content_hash, refusals, granted)


def require_pinnable(*, bundle: Bundle, version: BundleVersion, actor: Actor) -> PinVerdict:
    """PinNotAllowed (403 pin_not_allowed) unless `actor` may pin `version` by number."""
    verdict = pin_verdict(bundle=bundle, version=version, actor=actor)
    if not verdict.allowed:
        names = ", ".join(repr(r["label"]) for r in verdict.refusals)
        raise PinNotAllowed(
            f"Version {version.number} has not passed the checks and approvals {names} require, so it may not be "
            "pinned by number; pin a label, or ask ops to grant pin_any_version to your role or key.",
            {"version": version.number, "content_hash": version.content_hash, "labels": verdict.refusals},
        )
    return verdict
