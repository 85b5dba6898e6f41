"""Printing what the API says without letting it drive the terminal.

Ids, budgets, reasons and spec strings are whatever some submitter sent (the API refuses control
characters in new ids, but the log keeps older ones forever). Printed raw, an ESC starts an
escape sequence (colours, cursor moves, window titles, on some terminals worse), a bidi override
reorders what the reader sees, a lone surrogate crashes the UTF-8 encoder, and Rich reads
``[red]`` as markup and ``:smile:`` as an emoji. So every piece of text the client prints goes
through :func:`clean` (escapes, visible) and is handed to Rich as a :class:`~rich.text.Text`
(:func:`plain`), which Rich never parses; the consoles (:func:`console`) also have markup, emoji
and highlighting off, in case a plain ``str`` slips through.

Escaped, as ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN`` (``\\t``, ``\\n``, ``\\r`` by name): the
controls (C0, DEL, C1), lone surrogates, the line and paragraph separators, and every format
character, which holds the bidi controls (embeddings, overrides, isolates, marks) and the
invisible ones (zero-width spaces and joiners, tags). Escaping them costs a right-to-left name
its marks and an emoji sequence its joiners, but an id that displays as another id is worse, and
ids are not prose. Backslashes are left as they are, so the display is for people, not
unambiguous: ``--json`` (printed with every non-ASCII character escaped) is the exact form.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

#: Unicode categories shown escaped: controls, format characters (bidi, zero-width),
#: surrogates, line and paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _shown(char: str) -> str:
    if unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def clean(value: object) -> str:
    """``value`` as text that shows every unsafe character as an escape and does nothing."""
    text = str(value)
    if text.isprintable():  # the usual case; no unsafe category is printable
        return text
    return "".join(_shown(char) for char in text)


def plain(*parts: object) -> Text:
    """The parts, cleaned and joined, as a Text: printed as it reads, never as markup."""
    return Text("".join(clean(part) for part in parts))


def styled(style: str, label: str, *parts: object) -> Text:
    """``label`` (the client's own words) in ``style``, then the cleaned parts, plain."""
    return Text.assemble((label, style), plain(*parts))


def add_row(table: Table, cells: Iterable[object]) -> None:
    """A table row whose every cell is cleaned text (Rich would read a ``str`` as markup)."""
    table.add_row(*(plain(cell) for cell in cells))


def console(*, stderr: bool = False) -> Console:
    """A console that reads no markup, emoji codes or highlighting into what it prints."""
    return Console(stderr=stderr, soft_wrap=True, markup=False, emoji=False, highlight=False)
