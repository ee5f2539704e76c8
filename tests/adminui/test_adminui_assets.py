"""The admin's code editor is one committed file built from adminui/frontend: it must be
what the source and package-lock.json build, and it must stand alone (no CDN)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRONTEND = ROOT / "adminui" / "frontend"
BUNDLE = ROOT / "adminui" / "static" / "adminui" / "editor.js"


def test_the_committed_editor_bundle_loads_nothing_from_elsewhere():
    text = BUNDLE.read_text()
    assert text.startswith("/* adminui editor: CodeMirror 6 (MIT")
    assert not re.search(r"https?://(?!codemirror\.net)[\w.-]+/[\w./-]*\.(js|css)\b", text)
    assert "import(" not in text and "importScripts" not in text


def test_the_frontend_pins_its_dependencies_exactly():
    package = json.loads((FRONTEND / "package.json").read_text())
    lock = json.loads((FRONTEND / "package-lock.json").read_text())
    for name, version in {**package["dependencies"], **package["devDependencies"]}.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_the_committed_editor_bundle_is_what_the_source_builds(tmp_path):
    """Runs where `make ui-assets` has installed node_modules (a developer's machine)."""
    esbuild = FRONTEND / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists() or shutil.which("node") is None:
        pytest.skip("adminui/frontend/node_modules is not installed: run `make ui-assets` to check the bundle")
    script = json.loads((FRONTEND / "package.json").read_text())["scripts"]["build"]
    out = tmp_path / "editor.js"
    command = script.replace("esbuild ", f"{esbuild} ", 1).replace(
        "--outfile=../static/adminui/editor.js", f"--outfile={out}"
    )
    subprocess.run(command, shell=True, cwd=FRONTEND, check=True, capture_output=True, timeout=120)
    assert out.read_bytes() == BUNDLE.read_bytes(), "run `make ui-assets` and commit adminui/static/adminui/editor.js"
