"""The import direction (entry points -> services -> selectors -> models, no cycle) is checked
by import-linter's contracts in pyproject.toml; `make lint` runs them, and so does this test."""

import subprocess
import sys
from pathlib import Path

import pytest

from devtools.import_contracts import cycles

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_hold():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def test_it_finds_a_cycle_across_packages_and_ignores_a_chain():
    edges = {
        "registry.services": {"sessions_app.services", "registry.models"},
        "sessions_app.services": {"sessions_app.tasks"},
        "sessions_app.tasks": {"sessions_app.services"},
        "registry.models": set(),
        "api.views": {"registry.services"},
    }
    assert cycles(edges) == [["sessions_app.services", "sessions_app.tasks"]]
    edges["sessions_app.services"].add("registry.services")
    assert cycles(edges) == [["registry.services", "sessions_app.services", "sessions_app.tasks"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_apps_register_into_cores_interfaces_at_ready():
    """The domain counts and announces through core.instruments and core.events; the metrics
    and webhooks apps plug in at ready(). Without this, counts and deliveries would silently
    go nowhere (the default does nothing)."""
    from core import events, instruments
    from metrics.instruments import Instruments
    from registry import pins
    from sessions_app.selectors import SessionPins
    from webhooks.services import DELIVERIES

    assert isinstance(instruments._current, Instruments)
    assert DELIVERIES in events._subscribers
    assert isinstance(pins._pins, SessionPins)
    from sessions_app import hooks
    from skills.services import session_cards_drop

    assert session_cards_drop in hooks._on_end
    from access import hooks as access_hooks
    from sessions_app.services import sessions_to_lineage

    assert sessions_to_lineage in access_hooks._on_rotated


def test_an_unregistered_pins_interface_refuses_rather_than_answers_none(monkeypatch):
    """A drain that read "no sessions" from nobody would drain a version still in use."""
    from django.core.exceptions import ImproperlyConfigured

    from registry import pins

    monkeypatch.setattr(pins, "_pins", None)
    with pytest.raises(ImproperlyConfigured):
        pins.any_active(1)


def test_core_sends_tasks_through_the_configured_celery_app():
    """core.enqueue reaches config.celery's app as Celery's current app (no import of config)."""
    from config.celery import app as configured
    from core import enqueue

    assert enqueue.app._get_current_object() is configured


def test_every_runtime_package_is_in_the_package_graph_and_the_layers():
    import tomllib

    from devtools import package_graph

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert sorted(package_graph.PACKAGES) == sorted(config["root_packages"])
    layers = next(c for c in config["contracts"] if c["name"].startswith("Packages in layers"))
    layered = {name.strip() for layer in layers["layers"] for name in layer.replace(":", "|").split("|")}
    assert layered == set(config["root_packages"])
    assert not layers.get("ignore_imports")  # no exception left


def test_the_package_graph_has_no_cycle_and_its_finder_finds_one():
    from devtools import package_graph

    edges = package_graph.package_edges()
    assert package_graph.components(edges) == [] and package_graph.mutual_pairs(edges) == []
    knot = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert package_graph.components(knot) == [["a", "b", "c"]]
    assert package_graph.mutual_pairs({"a": {"b"}, "b": {"a"}}) == [("a", "b")]


def test_every_folder_of_modules_in_a_runtime_package_is_a_package():
    """import-linter and the package graph see packages only: a folder of modules without an
    `__init__.py` (Django loads a management/commands/ folder without one) hides its imports
    from every contract."""
    from devtools import package_graph

    missing = [
        str(folder.relative_to(ROOT))
        for package in package_graph.PACKAGES
        for folder in [ROOT / package, *(ROOT / package).rglob("*")]
        if folder.is_dir()
        and not {"__pycache__", "node_modules"} & set(folder.parts)
        and any(folder.glob("*.py"))
        and not (folder / "__init__.py").exists()
    ]
    assert missing == []


def test_make_lint_checks_at_strict_the_packages_the_strict_override_names():
    import re
    import tomllib

    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    (strict,) = [o for o in mypy["overrides"] if o.get("disallow_untyped_defs")]
    (line,) = re.findall(r"^MYPY_STRICT := (.+)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert sorted(f"{name}.*" for name in line.split()) == sorted(strict["module"])
