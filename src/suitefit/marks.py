"""``xdist_group`` marks as the source spells them: the doctor's scan and a first plan read
them with the same patterns (``pytest`` itself, and the history, know them from a run)."""

from __future__ import annotations

import re

# A mark in use, not a mention: @pytest.mark.xdist_group(...), add_marker("xdist_group"...),
# Mark("xdist_group", ...), pytestmark = [...xdist_group...].
MARK_USE = re.compile(rb"""mark\.xdist_group\s*\(|(?:add_marker|Mark)\(\s*["']xdist_group["']""")
# xdist_group("db"), xdist_group(name="db"): the names a plain string gives
_GROUP_NAME = re.compile(rb"""xdist_group\s*\(\s*(?:name\s*=\s*)?["']([^"']*)["']""")
UNNAMED = "?"  # a mark whose name is not a plain string in the source


def group_names(text: bytes) -> set[str]:
    """The groups ``text`` (a file's source) marks tests with; ``{UNNAMED}`` for a mark in use
    whose name is no plain string; empty when it uses none (a mention is not a use)."""
    if b"xdist_group" not in text:
        return set()
    names = {m.group(1).decode(errors="replace") for m in _GROUP_NAME.finditer(text)}
    if names:
        return names
    return {UNNAMED} if MARK_USE.search(text) else set()
