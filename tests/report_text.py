"""The text a reader of an HTML report sees: styles, scripts and figures dropped, tags removed,
entities unescaped, whitespace collapsed (for asserting which words a report uses)."""

from __future__ import annotations

import html
import re


def visible_text(page: str) -> str:
    body = re.sub(r"<style.*?</style>|<script.*?</script>|<svg.*?</svg>", "", page, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))
