"""An evaluation run as an in-toto Statement v1 (https://github.com/in-toto/attestation, spec
v1): the subject is the bundle version's content (its SHA-256, the content hash), the predicate
names what the result means: the suite's hash, the scorers' hash, each judge's hash, the model,
the runs, the threshold and the pass rate. Anyone holding the bundle's bytes and the suite's can
recompute every digest in it (docs/evals.md shows how). Unsigned: the registry's word, bound to
bytes; sign it with your own tooling (for example cosign attest) where you need a signature."""

import json
from typing import Any

from evals import content

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:prompt-registry:evaluation:v1"


def statement(*, run: Any, bundle: Any, suite_doc: dict[str, Any]) -> dict[str, Any]:
    suite_version = run.suite_version
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"{bundle.name}@{run.version.number}", "digest": {"sha256": run.content_hash}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "run": str(run.id),
            "suite": {
                "name": suite_version.suite.name,
                "version": suite_version.number,
                "digest": {"sha256": suite_version.content_hash},
            },
            "scorers": {"digest": {"sha256": content.scorers_hash(suite_doc)}},
            "judges": [
                {"bundle": j["bundle"], "digest": {"sha256": j["content_hash"]}} for j in content.judges(suite_doc)
            ],
            "provider": run.provider,
            "model": run.model,
            "runs": run.runs,
            "threshold": run.threshold,
            "total": run.total,
            "passed": run.passed,
            "errors": run.errors,
            "pass_rate": run.pass_rate,
            "status": run.status,
            "created_at": run.created_at.isoformat(),
            "created_by": run.created_by,
        },
    }


def statement_bytes(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
