"""What the admin home page's retiring-models line ("3 labels pin models that retire within 30
days") costs per page load: the full retiring view it used to compute every time
(registry.selectors.models_retiring_usage: every live and draining version with a bounded count
of its sessions), against adminui.selectors.retiring_line, cold (its first load of the day, or
after an override) and warm (every other load, kept per process).

    DATABASE_URL=... REDIS_URL=... python -m devtools.stack test bench/home_retiring.py -q -s -p no:randomly

Seeds 150 bundles, each with two live versions (one on gpt-5, which retires within the window
at the suite's clock, one on claude-sonnet-4-6), `production` and `staging` on them and 20
active sessions per version (6,000); prints the median of 20 loads of each, in milliseconds."""

import statistics
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from access.actors import SYSTEM
from adminui import selectors as home
from modelcatalog.selectors import retirement_warning
from registry.selectors import models_retiring_usage
from registry.services import bundle_create, label_move, version_publish
from sessions_app.models import Session
from tests.conftest import content

BUNDLES, SESSIONS = 150, 20


def _median_ms(fn, n: int = 20, before=None) -> float:
    times = []
    for _ in range(n):
        if before:
            before()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


@pytest.mark.django_db
def test_bench(settings):
    settings.MODEL_CLOCK_NOW = "2026-12-07T12:00:00+00:00"
    now = timezone.now()
    rows = []
    for i in range(BUNDLES):
        bundle = bundle_create(name=f"b{i}", actor=SYSTEM)
        for n, (model, label) in enumerate((("gpt-5", "staging"), ("claude-sonnet-4-6", "production"))):
            doc = content(f"Prompt {i} {n}.", model={"name": model})
            v = version_publish(bundle=bundle, content=doc, message="m", actor=SYSTEM).version
            label_move(bundle=bundle, name=label, version=v, actor=SYSTEM, reason="r", allow_retiring=True)
            rows += [
                Session(
                    bundle=bundle,
                    version=v,
                    label=label,
                    ttl_seconds=3600,
                    started_at=now,
                    last_seen_at=now,
                    expires_at=now + timedelta(hours=1),
                )
                for _ in range(SESSIONS)
            ]
    Session.objects.bulk_create(rows, batch_size=2000)
    warning = retirement_warning()
    line = home.retiring_line()
    assert line["labels"] == BUNDLES, line
    full = _median_ms(lambda: models_retiring_usage(within=warning, actor=None))
    cold = _median_ms(home.retiring_line, before=home.retiring_line_forget)
    warm = _median_ms(home.retiring_line)
    print(f"{BUNDLES} bundles, {2 * BUNDLES} live versions, {len(rows)} active sessions:")
    print(f"  the full retiring view (what each home page load computed): {full:.1f} ms")
    print(f"  retiring_line, cold (first load of the day or after an override): {cold:.1f} ms")
    print(f"  retiring_line, warm (every other load, per process): {warm:.3f} ms")
    page = _median_ms(home.dashboard, n=10)
    print(f"  the whole home dashboard read, warm: {page:.1f} ms")
