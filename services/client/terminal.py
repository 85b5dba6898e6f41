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
from collections.abc import Collection, Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
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


#: In a column of sentences (``prose``), a token longer than this (an id or a path quoted in
#: the sentence, whole in its own column) may fold; every other column keeps its longest word.
PROSE_WORD = 12

#: Cell padding: one space before each column, as squeue separates its columns (and a line
#: starts with one, so that `` id `` finds an id in any column).
_PADDING = (0, 0, 0, 1)
_PAD = _PADDING[1] + _PADDING[3]


class FittedTable:
    """A table laid out for the terminal's width when it is printed, as squeue's is: columns
    one space apart rather than boxed (a box costs three of eighty columns per column).

    Ids and budget paths (the columns named in ``whole``) are never cut, folded or wrapped:
    a reader pastes them into the next command, and ``demo-…`` is every workload of a demo.
    Nor is any word of another column (a status, a reason code): only in a column of
    sentences (``prose``) may a long token (an id quoted there) fold.
    A cell that is a list or a tuple holds one item a line (a node's workloads, a gang's
    nodes), so that in such a column each id is whole too. When the width cannot give every
    other column at least its longest word, the columns named in ``drop`` go, in that order
    (the least useful first), and a caption says which: ``--json`` has them all. The width
    left is shared out by :func:`_fit` (Rich's own layout narrows the widest columns first,
    down to folding a one-word status while a sentence beside it had room to wrap). A table
    too wide even without those columns keeps its ids whole and lets the terminal wrap the
    line (the client's consoles soft-wrap, never crop).

    Every cell is cleaned text (:func:`plain`): Rich would read a ``str`` as markup."""

    def __init__(
        self,
        *headers: str,
        whole: Collection[str] = (),
        drop: Sequence[str] = (),
        title: str | None = None,
        show_header: bool = True,
        prose: Collection[str] = (),
    ) -> None:
        unknown = sorted((set(whole) | set(drop) | set(prose)) - set(headers))
        if unknown:
            raise ValueError(f"not columns of this table: {unknown}")
        self.headers = headers
        self.whole = frozenset(headers.index(header) for header in whole)
        self.drop = tuple(headers.index(header) for header in drop)
        self.prose = frozenset(headers.index(header) for header in prose)
        self.title = title
        self.show_header = show_header
        self.rows: list[tuple[Text, ...]] = []

    def add_row(self, cells: Iterable[object]) -> None:
        row = tuple(_cell(cell) for cell in cells)
        if len(row) != len(self.headers):
            raise ValueError(f"{len(row)} cells for {len(self.headers)} columns")
        self.rows.append(row)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        spans = [self._span(console, options, i) for i in range(len(self.headers))]
        shown = list(range(len(self.headers)))
        for i in self.drop:
            if sum(spans[k][0] for k in shown) <= options.max_width:
                break
            shown.remove(i)
        widths = _fit([spans[i] for i in shown], options.max_width)
        table = self._table(shown, spans, widths)
        wide = sum(widths) if widths is not None else 0
        if wide > options.max_width:
            # wider than the terminal even at each column's least: laid out at that width (the
            # terminal wraps the lines), never squeezed into cut words and ids
            yield from console.render(table, options.update_width(wide))
            return
        yield table

    def _span(self, console: Console, options: ConsoleOptions, i: int) -> tuple[int, int]:
        """The least and the most width of column ``i``, padding included: a whole column's
        widest line either way, else its longest word and its longest line."""
        texts = [Text(self.headers[i]), *(row[i] for row in self.rows)]
        if i in self.whole:
            widest = max(_widest_line(text) for text in texts) + _PAD
            return widest, widest
        measured = [Measurement.get(console, options, text) for text in texts]
        least = max(m.minimum for m in measured)
        if i in self.prose:
            least = min(least, PROSE_WORD)
        return least + _PAD, max(m.maximum for m in measured) + _PAD

    def _table(
        self, shown: list[int], spans: list[tuple[int, int]], widths: list[int] | None
    ) -> Table:
        dropped = [self.headers[i] for i in range(len(self.headers)) if i not in shown]
        table = Table(
            box=None,
            padding=_PADDING,
            show_header=self.show_header,
            title=None if self.title is None else _wrapped(self.title),
            caption=(
                _wrapped(f"not shown at this width: {', '.join(dropped)} (--json has them)")
                if dropped
                else None
            ),
            caption_justify="left",
        )
        for k, i in enumerate(shown):
            width = None if widths is None else widths[k] - _PAD
            if i in self.whole:  # whole when Rich lays it out too (widths None)
                least = spans[i][0] - _PAD
                table.add_column(self.headers[i], no_wrap=True, min_width=least, width=width)
            else:
                least = spans[i][0] - _PAD  # never below its longest word
                table.add_column(self.headers[i], overflow="fold", width=width, min_width=least)
        for row in self.rows:
            table.add_row(*(row[i] for i in shown))
        return table


def _fit(spans: Sequence[tuple[int, int]], room: int) -> list[int] | None:
    """Widths in ``room`` for columns of (least, most) widths: each its least, and the spare to
    the others, those that need the least more first (so a short status is whole and a
    sentence wraps in what is left). None when they all fit at their most: then Rich lays the
    table out. When not even their least fits, each gets its least, wider than ``room``: the
    line is longer than the terminal, which wraps it, and no word is cut (Rich's own layout
    folded a column down to a letter a line: "unallocate/d")."""
    least = sum(low for low, _ in spans)
    if least > room:
        return [low for low, _ in spans]
    if sum(high for _, high in spans) <= room:
        return None
    widths = [low for low, _ in spans]
    spare = room - least
    wanting = sorted(range(len(spans)), key=lambda k: spans[k][1] - spans[k][0])
    for n, k in enumerate(wanting):
        given = min(spans[k][1] - widths[k], spare // (len(wanting) - n))
        widths[k] += given
        spare -= given
    return widths


def _wrapped(text: str) -> Text:
    """``text`` (cleaned) wrapped to the table's width: the client's consoles soft-wrap, so a
    plain Text over a table would run on as one line for the terminal to break anywhere."""
    shown = plain(text)
    shown.no_wrap, shown.overflow = False, "fold"
    return shown


def _cell(value: object) -> Text:
    if isinstance(value, list | tuple):
        return Text("\n").join(plain(item) for item in value)
    return plain(value)


def _widest_line(text: Text) -> int:
    return max(cell_len(line) for line in text.plain.split("\n"))


def console(*, stderr: bool = False) -> Console:
    """A console that reads no markup, emoji codes or highlighting into what it prints."""
    return Console(stderr=stderr, soft_wrap=True, markup=False, emoji=False, highlight=False)
