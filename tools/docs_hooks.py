"""MkDocs hooks of the documentation site (mkdocs.yml's ``hooks:``).

The docstrings name other objects with Sphinx's roles (:func:`load_config`, :class:`~pkg.errors.ResumeError`),
which read well in ``help()``; on the Python API page, rendered as Markdown, a role would show as its own text
before the name. The role goes, and ``~pkg.mod.Name`` shows as ``Name``, as Sphinx shows it.
"""
from __future__ import annotations

import re

# A role's text, then the name Markdown made code of: ":func:<code>x</code>".
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|exc|data|obj):<code>(~?)([^<]*)</code>")


def without_roles(html: str) -> str:
    """``html`` with each role's text left out of the code it names."""
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)


def on_page_content(html: str, page, config, files) -> str:
    """MkDocs' hook: every page's HTML, once rendered from its Markdown."""
    return without_roles(html)
