"""The site's home page is README.md, so GitHub and the site show one text.

Why a hook and not a copy: README's links start at the repository's root (``docs/python.md``),
the site's at ``docs/`` (``python.md``); the hook drops that prefix as it renders ``index.md``,
so there is no second copy to drift, and the site's strict build checks README's links and
anchors too.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
#: A Markdown link target inside docs/, written from the repository's root.
FROM_ROOT = re.compile(r"\]\(docs/")


def on_page_markdown(markdown: str, page, config, files) -> str:
    """MkDocs hook: ``index.md`` is rendered from README.md."""
    if page.file.src_uri != "index.md":
        return markdown
    return FROM_ROOT.sub("](", README.read_text(encoding="utf-8"))
