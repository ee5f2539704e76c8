import time

import pytest

from access.actors import SYSTEM
from registry.models import BundleVersion
from registry.selectors import retired_model
from registry.services import bundle_create, version_publish
from tests.conftest import content


@pytest.mark.django_db
def test_bench():
    bundle = bundle_create(name="b", actor=SYSTEM)
    v = version_publish(bundle=bundle, content=content(model={"name": "gpt-5"}), message="m", actor=SYSTEM).version
    stand_in = BundleVersion(id=v.pk, content_hash=v.content_hash)
    retired_model(stand_in)
    n = 200_000
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(n):
            retired_model(stand_in)
        print(f"retired_model, warm: {(time.perf_counter() - t) / n * 1e6:.2f} us per call")
