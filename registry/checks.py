"""Checks: CI results (and evaluation runs) bound to a version's content hash. The latest report
per name counts; a label's `required_checks` reads them (registry.lifecycle)."""

import re
from typing import Any

from django.db import transaction

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope
from audit.services import audit_record
from core import events
from core.errors import Forbidden, InvalidContent
from core.limits import CHECK_DETAILS_URL_MAX, CHECK_NAME_RE, CHECK_SUMMARY_MAX, EVAL_CHECK_PREFIX, storable
from registry.models import Bundle, BundleVersion, CheckStatus, VersionCheck

# Who may report a check: a CI pipeline's key, or ops and admin (by hand). Not a publisher: the
# gate exists so that whoever publishes cannot also certify what they published.
CHECK_REPORTERS = frozenset({Role.CI, Role.OPS, Role.ADMIN})


def check_report(
    *,
    version: BundleVersion,
    name: object,
    status: object,
    actor: Actor,
    summary: object = "",
    details_url: object = "",
) -> VersionCheck:
    """Record a check result for `version`'s content hash (append-only: the latest per name
    counts). `success` and `failure` are announced as `check.completed`."""
    if actor.role not in CHECK_REPORTERS:
        raise Forbidden("Reporting a check needs the ci role (or ops).")
    bundle = Bundle.objects.get(pk=version.bundle_id)
    require_bundle_scope(actor, bundle.name)
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not re.fullmatch(CHECK_NAME_RE, name):
        errors["name"] = [f"Must match {CHECK_NAME_RE}."]
    elif name.startswith(EVAL_CHECK_PREFIX):
        errors["name"] = ["eval: checks are reported by an evaluation run (POST .../evals/), with its attestation."]
    if status not in CheckStatus.values:
        errors["status"] = [f"One of {', '.join(CheckStatus.values)}."]
    summary = "" if summary is None else summary
    if not isinstance(summary, str) or len(summary) > CHECK_SUMMARY_MAX or not storable(summary):
        errors["summary"] = [f"Text of at most {CHECK_SUMMARY_MAX} characters."]
    details_url = "" if details_url is None else details_url
    if not isinstance(details_url, str) or len(details_url) > CHECK_DETAILS_URL_MAX or not storable(details_url):
        errors["details_url"] = [f"An http(s) URL of at most {CHECK_DETAILS_URL_MAX} characters."]
    elif details_url and not re.fullmatch(r"https?://[^\s]+", details_url):
        errors["details_url"] = ["An http or https URL."]
    if errors:
        raise InvalidContent("The check is not valid; see details.", errors)
    assert isinstance(name, str) and isinstance(status, str)
    assert isinstance(summary, str) and isinstance(details_url, str)
    with transaction.atomic():
        return check_record(
            bundle=bundle,
            version=version,
            name=name,
            status=status,
            summary=summary,
            details_url=details_url,
            actor=actor,
        )


def check_record(
    *,
    bundle: Bundle,
    version: BundleVersion,
    name: str,
    status: str,
    summary: str,
    actor: Actor,
    details_url: str = "",
    evidence: dict[str, Any] | None = None,
) -> VersionCheck:
    """Append one check report, validated by the caller (check_report for CI's reports,
    evals.services for an evaluation run's, with its `evidence`), inside its transaction."""
    check = VersionCheck.objects.create(
        bundle=bundle,
        content_hash=version.content_hash,
        name=name,
        status=status,
        summary=summary,
        details_url=details_url,
        reported_by=actor.name,
        evidence=evidence,
    )
    audit_record(
        actor=actor,
        action="check.reported",
        target_type="version",
        target=f"{bundle.name}@{version.number}",
        data={"name": name, "status": status, "content_hash": version.content_hash},
    )
    if status != CheckStatus.PENDING:
        events.emit(
            "check.completed",
            bundle=bundle.name,
            version=version.number,
            content_hash=version.content_hash,
            name=name,
            status=status,
            details_url=details_url or None,
            by=actor.name,
        )
    return check
