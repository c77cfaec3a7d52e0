"""Markdown: raw HTML wrapper lines and VitePress containers are removed before ``partition_md``.

Python-Markdown leaves everything inside a raw HTML block unprocessed, so documentation written
for site generators (Vue/VitePress components, ``<div>`` wrappers) would otherwise hide the
content between the wrappers.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
# the first word of a fence's info string (the language); the rest ("{2}", attributes) is dropped
_INFO_WORD = re.compile(r"[\w+#.-]*")
_TAG_LINE = re.compile(r"^\s*</?[A-Za-z][\w.:-]*(\s[^<>]*)?/?>\s*$")
_TAG_OPEN = re.compile(r"^\s*<[A-Za-z][\w.:-]*(\s[^<>]*)?$")
#: front matter with the blank lines after it (``\A---\s*\n.*?\n---\s*\n``, written so that a run of
#: whitespace-only lines is taken whole, never re-split at each of its positions: linear)
_FRONT_MATTER = re.compile(r"\A---[^\S\n]*+\n(?:(?:[^\S\n]*+\n)++(?:.*?\n)?|.*?\n)---(?:[^\S\n]*+\n)++", re.S)
_CONTAINER = re.compile(r"^\s*:::+\s*(\w[\w-]*)?\s*(.*)$")


def elements(text: str) -> tuple[list, str]:
    """unstructured elements of a Markdown document; the title comes from its headings."""
    from unstructured.partition.md import partition_md  # parse package stays light: loads per format

    return partition_md(text=clean_markdown(text), languages=[""]), ""


def clean_markdown(text: str) -> str:
    """Drop raw HTML wrapper lines (``<div class=...>``, ``</div>``, component tags) and
    VitePress ``:::`` container fences outside code fences.

    Python-Markdown leaves everything inside a raw HTML block unprocessed, so a fenced
    ``<script setup>`` example inside ``<div class="composition-api">`` would swallow the rest
    of the page. The content between the wrappers is kept; a container's title stays as text.
    """
    text = _FRONT_MATTER.sub("", text, count=1)
    out: list[str] = []
    fence: str | None = None
    in_tag = False
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is not None:
            out.append(line)
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not line.strip()[len(m.group(1)) :].strip()
            ):
                fence = None
            continue
        if m:  # normalise the info string: ```vue-html{2} is not a fence to Python-Markdown
            fence = m.group(1)
            info = _INFO_WORD.match(line.strip()[len(fence) :].strip())
            lang = info.group(0) if info else ""
            out.append(fence + lang)
            continue
        if in_tag:  # a tag spread over several lines (<Component\n  attr="..."\n/>)
            if line.rstrip().endswith(">"):
                in_tag = False
            continue
        if _TAG_LINE.match(line):
            out.append("")
            continue
        if _TAG_OPEN.match(line) and not line.rstrip().endswith(">"):
            in_tag = True
            out.append("")
            continue
        c = _CONTAINER.match(line)
        if c and line.lstrip().startswith(":::"):
            out.append("")
            if c.group(2).strip():
                out.extend([f"**{c.group(2).strip()}**", ""])
            continue
        out.append(line)
    return "\n".join(out)
