"""The documentation site builds with MkDocs with warnings as errors: a broken link or anchor, a page
missing from the navigation or a snippet that is not there fails the suite."""
from __future__ import annotations

import html
import os
import pathlib
import re
import subprocess
import sys

import pytest

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
    # The Python API page, from the docstrings: a function's Args, Returns and Raises as tables, Sphinx roles
    # shown as the names alone
    api = html.unescape(re.sub(r"<[^>]+>", " ", (built / "api" / "index.html").read_text(encoding="utf-8")))
    api = " ".join(api.split())
    assert "load_manifest ( path : str | PathLike ) -> Manifest" in api
    assert ("Raises: Type Description ManifestError every problem found (the file unreadable, its schema, its "
            "features), at once.") in api
    assert "Parameters: Name Type Description Default server a server start_dispatcher or start_worker started." in api
    assert ":func:" not in api and ":class:" not in api and ":meth:" not in api


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


def _hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "tools" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("html,shown", [
    (":func:<code>load_config</code> gave", "<code>load_config</code> gave"),
    ("a :class:<code>~batchloaders.errors.ResumeError</code>", "a <code>ResumeError</code>"),
    (":meth:<code>get_state</code>, :mod:<code>batchloaders.cli.infer</code>",
     "<code>get_state</code>, <code>batchloaders.cli.infer</code>"),
    ("<code>a:b</code> and func:<code>x</code>", "<code>a:b</code> and func:<code>x</code>"),  # no role: as it is
])
def test_the_api_page_shows_sphinx_roles_as_the_names(html, shown):
    assert _hooks().without_roles(html) == shown
