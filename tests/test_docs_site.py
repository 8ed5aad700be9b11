"""The docs site builds with ``mkdocs build --strict`` (no broken link, no missing page, no
docstring the reference cannot render), every page is in its navigation, the API reference is
generated from the docstrings of every public name, the CLI reference lists every verb, and the
terminal screenshots are real PNGs that the script in docs/ can make again."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import contextstore as cs
from contextstore.cli import app

from support import RedisProcess

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SCREENSHOTS = ("cli-show.png", "cli-stats.png", "cli-watch.png")
FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return out


def nav_pages(nav: list) -> set[str]:
    pages = set()
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_page_is_in_the_navigation():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert nav_pages(config["nav"]) == {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}


def test_the_api_reference_renders_every_public_name_from_its_docstring(site):
    pages = "".join(html.unescape(p.read_text()) for p in (site / "reference").rglob("index.html"))
    text = re.sub(r"<[^>]+>", "", pages)
    for name in cs.__all__:
        assert f'id="contextstore.{name}"' in pages, f"{name} is not in the API reference"
        first_line = (getattr(cs, name).__doc__ or "").strip().splitlines()[0]
        words = re.sub(r"``?", "", first_line)[:40]
        assert words in text, f"{name}'s docstring is not in the reference: {words!r}"
    assert not re.search(r":(meth|class|attr|func):", text), "a docstring uses a reST role, which shows raw"
    assert 'id="contextstore.ContextWindow.build_messages"' in pages  # methods too, inherited ones too
    assert 'id="contextstore.ContextStore.from_url"' in pages


def test_the_cli_reference_lists_every_verb_with_its_help(site):
    page = html.unescape((site / "cli-reference" / "index.html").read_text())
    verbs = [name for name, command in app.cli.commands.items() if not command.hidden]
    assert len(verbs) >= 20
    for verb in verbs:
        assert f'id="contextstore-{verb}"' in page, verb
        assert (app.cli.commands[verb].help or "").splitlines()[0] in page, verb


def test_the_screenshots_are_pngs_shown_in_the_quickstart(site):
    quickstart = (DOCS / "quickstart.md").read_text()
    for name in SCREENSHOTS:
        assert (DOCS / "img" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(img/{name})" in quickstart
        assert (site / "img" / name).exists()


@pytest.mark.skipif(shutil.which("tmux") is None or not FONT.exists(), reason="needs tmux and DejaVu Sans Mono")
def test_the_screenshot_script_captures_real_runs(tmp_path):
    made = subprocess.run(
        [sys.executable, str(DOCS / "screenshots.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert made.returncode == 0, made.stderr
    from PIL import Image

    for name in SCREENSHOTS:
        with Image.open(tmp_path / name) as image:
            assert image.width > 800 and image.height > 200
            colours = image.convert("RGB").getcolors(maxcolors=100_000) or []
            assert len(colours) > 10, f"{name} is blank"


@pytest.mark.parametrize("page", ["index.md", "quickstart.md"])
def test_the_first_pages_python_runs_as_shown(page, monkeypatch, capsys):
    """The code a newcomer copies first runs unchanged, against a fresh server (CONTEXTSTORE_URL)."""
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), re.S)
    assert blocks
    server = RedisProcess().start()
    try:
        monkeypatch.setenv("CONTEXTSTORE_URL", server.url)
        for block in blocks:
            exec(compile(block, f"docs/{page}", "exec"), {})
        with cs.ContextStore.from_url(server.url) as store:
            assert [i.type.value for i in store.window("agent-7", create=False).items()][-1] == "user_message"
    finally:
        server.stop()
