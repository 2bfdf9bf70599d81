"""The documentation site builds with MkDocs with warnings as errors: a broken link or anchor, a page
missing from the navigation or a snippet that is not there fails the suite."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]


def test_the_site_builds_strict(tmp_path):
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=REPO, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stderr[-4000:]
    built = tmp_path / "site"
    assert (built / "index.html").exists() and (built / "reference" / "index.html").exists()
    # README's tutorial is included in Getting started, code blocks and all
    page = (built / "getting-started" / "index.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", page)  # the words as shown, without the highlighting's tags
    assert "batchloaders init ~/bl_tutorial/data" in text


def test_every_page_is_in_the_navigation():
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(items):
        for item in items:
            values = [item] if isinstance(item, str) else item.values()
            for value in values:
                yield from (pages(value) if isinstance(value, list) else [value])
    listed = set(pages(nav))
    assert listed == {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
