"""The registry does not import its own SDK (client/promptreg): the two pure, standard-library
modules both need are the registry's (core/), and the client ships byte-identical copies so it
stays installable alone. Edit the core/ file, then copy it over; these tests fail until you do."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COPIES = [
    ("core/compaction.py", "client/promptreg/compaction.py"),
    ("registry/exportdir.py", "client/promptreg/transfer.py"),
]


@pytest.mark.parametrize(("server", "client"), COPIES)
def test_it_ships_the_client_a_byte_identical_copy(server, client):
    assert (ROOT / client).read_bytes() == (ROOT / server).read_bytes()


@pytest.mark.parametrize(("server", "client"), COPIES)
def test_the_copies_need_nothing_but_the_standard_library(server, client):
    source = (ROOT / server).read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "re", "dataclasses", "typing", "hashlib", "json", "os", "tempfile", "pathlib"}


def test_no_runtime_package_imports_the_client():
    import grimp

    runtime = ["access", "adminui", "api", "audit", "config", "core", "knowledge", "mcp_server", "metrics"]
    runtime += ["registry", "retention", "sessions_app", "skills", "webhooks"]
    graph = grimp.build_graph(*runtime, include_external_packages=True)
    assert "promptreg" not in graph.modules  # an imported external package would be a node
