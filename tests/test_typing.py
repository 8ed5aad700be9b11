"""The package type-checks under mypy --strict (it ships py.typed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_strict_on_the_package():
    pytest.importorskip("mypy")
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(ROOT / "contextstore")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout + res.stderr
