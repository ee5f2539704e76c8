"""The per-call cost of the model-retirement check every pinned call makes
(registry.selectors.retired_model on a stand-in of a few columns, as the fetch path builds it),
warm: the version's model and the catalog already in the process.

    DATABASE_URL=... REDIS_URL=... python -m devtools.stack test bench/model_check.py -q -s -p no:randomly

Prints microseconds per call, three rounds of 200,000 calls, with the catalog's clock unset
(production) and fixed (the test suite)."""

import time

import pytest

from access.actors import SYSTEM
from registry.models import BundleVersion
from registry.selectors import retired_model
from registry.services import bundle_create, version_publish
from tests.conftest import content


@pytest.mark.django_db
@pytest.mark.parametrize("clock", [None, "2026-12-07T12:00:00+00:00"])
def test_bench(settings, clock):
    # Published before gpt-5's date (2026-12-11) whatever the calendar says: then measured.
    settings.MODEL_CLOCK_NOW = "2026-12-07T12:00:00+00:00"
    bundle = bundle_create(name="b", actor=SYSTEM)
    v = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="m", actor=SYSTEM).version
    settings.MODEL_CLOCK_NOW = clock
    stand_in = BundleVersion(id=v.pk, content_hash=v.content_hash)
    retired_model(stand_in)
    n = 200_000
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            retired_model(stand_in)
        print(f"MODEL_CLOCK_NOW={clock}: retired_model, warm: {(time.perf_counter() - t) / n * 1e6:.2f} us per call")
