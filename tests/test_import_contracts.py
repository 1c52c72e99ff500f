"""The import rules of docs/architecture.md: pyproject.toml's import-linter contracts hold on this tree."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_import_contracts_hold():
    done = _lint_imports("--no-cache")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_broken_contract_fails(tmp_path):
    # The checker reads this tree's imports: a rule the code breaks (the core imports mgst.model) is reported.
    config = tmp_path / "broken.toml"
    config.write_text(textwrap.dedent("""
        [tool.importlinter]
        root_packages = ["mgst"]

        [[tool.importlinter.contracts]]
        name = "a rule the tree breaks"
        type = "forbidden"
        source_modules = ["mgst.core"]
        forbidden_modules = ["mgst.model"]
    """))
    done = _lint_imports("--no-cache", "--config", str(config))
    assert done.returncode != 0
    assert "mgst.core" in done.stdout and "mgst.model" in done.stdout
