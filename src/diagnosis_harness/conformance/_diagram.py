"""SVG state diagrams of the machine tables, with transition coverage drawn on the edges.

Theory of operation. A simple layered layout, computed, never hand-drawn: each state's column is
its breadth-first depth from the initial state (states the table cannot reach go last), states
keep the order in which the rows first name them, and every column is centred vertically.
Boxes are sized from their names in a monospace font, so no text measuring is needed. Edges are
cubic Béziers with an arrowhead: between neighbouring columns straight across (parallel edges of
one pair of states fanned apart, both directions together), a state's own loops stacked above
its box, edges within a column bulging to the right and longer ones arched over the top. Each
label (``event [guard]``, with a count or ``never`` when coverage was recorded) sits at its
curve's midpoint, or, where that would cover a box or a label already placed, at the first point
nearer either end that covers nothing. The canvas is the bounding box of everything drawn.

The initial state has a filled dot and arrow, terminal states a double border. With coverage,
rows never taken are red and dashed and states never reached are greyed. Every piece of text is
escaped. The SVG needs no stylesheet, script or font file: presentation attributes only.
"""

from __future__ import annotations

import html
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from ._report import RowCoverage, TableCoverage

__all__ = ["render_svg"]

_STATE_FONT = 13.0
_LABEL_FONT = 11.0
_CHAR = 0.61  # advance of a monospace glyph, in em (DejaVu Sans Mono: 0.602)
_BOX_H = 40.0
_V_GAP = 48.0
_MIN_COL_GAP = 120.0
_LOOP_STEP = 26.0
_FAN = 30.0  # control-point spread between parallel edges
_MARGIN = 24.0
_MONO = "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace"

TIMES = "\u00d7"  # the multiplication sign before a count

_COLOURS = {
    "covered": "#2e7d32",
    "never": "#c62828",
    "unrecorded": "#455a64",
}


_Path = tuple[tuple[float, float], ...]  # P0, P1, P2, P3 of one cubic Bézier


@final
@dataclass(frozen=True, slots=True)
class _Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def right(self) -> float:
        return self.x + self.w


@final
@dataclass(slots=True)
class _Edge:
    row: RowCoverage
    path: _Path
    anchor: str  # text-anchor of the label
    dx: float  # the label's offset from its point on the curve
    dy: float
    fixed: bool = False  # a loop's label stays at the top of the loop
    label_at: tuple[float, float] = (0.0, 0.0)


def _text_width(text: str, size: float) -> float:
    return len(text) * size * _CHAR


def _fmt(value: float) -> str:
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return "0" if text in {"", "-0"} else text


def _columns(table: TableCoverage) -> list[list[str]]:
    """States by breadth-first depth from the initial state; unreachable ones last."""
    successors: dict[str, list[str]] = {state: [] for state in table.states}
    for row in table.rows:
        if row.target not in successors[row.source]:
            successors[row.source].append(row.target)
    depth = {table.initial: 0}
    queue = deque([table.initial])
    while queue:
        state = queue.popleft()
        for target in successors[state]:
            if target not in depth:
                depth[target] = depth[state] + 1
                queue.append(target)
    last = max(depth.values()) + 1
    columns: list[list[str]] = [[] for _ in range(last + 1)]
    for state in depth:  # insertion order: breadth-first, rows in table order
        columns[depth[state]].append(state)
    columns[last].extend(state for state in table.states if state not in depth)
    return [column for column in columns if column]


def _label(row: RowCoverage, recorded: bool) -> str:
    if not recorded:
        return row.label
    return f"{row.label} {TIMES}{row.count}" if row.count else f"{row.label} · never"


def _bezier(p: _Path, t: float) -> tuple[float, float]:
    u = 1 - t
    a, b, c, d = u * u * u, 3 * u * u * t, 3 * u * t * t, t * t * t
    return (
        a * p[0][0] + b * p[1][0] + c * p[2][0] + d * p[3][0],
        a * p[0][1] + b * p[1][1] + c * p[2][1] + d * p[3][1],
    )


_Rect = tuple[float, float, float, float]  # left, top, right, bottom
# Where along its curve a label may sit, best first: the middle, then ever nearer either end.
_LABEL_TS = (0.5, 0.4, 0.6, 0.32, 0.68, 0.25, 0.75, 0.18, 0.82)


def _label_rect(text: str, at: tuple[float, float], anchor: str) -> _Rect:
    width = _text_width(text, _LABEL_FONT)
    left = at[0] - width / 2 if anchor == "middle" else at[0]
    return (left - 2, at[1] - _LABEL_FONT, left + width + 2, at[1] + 3)


def _overlap(a: _Rect, b: _Rect) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _place(
    text: str,
    path: _Path,
    *,
    anchor: str,
    dx: float,
    dy: float,
    taken: list[_Rect],
) -> tuple[float, float]:
    """The first point along ``path`` where the label overlaps nothing placed, else the least
    crowded one; the label's rectangle joins ``taken``."""
    best: tuple[float, tuple[float, float], _Rect] | None = None
    for t in _LABEL_TS:
        x, y = _bezier(path, t)
        at = (x + dx, y + dy)
        rect = _label_rect(text, at, anchor)
        crowding = sum(_overlap(rect, other) for other in taken)
        if best is None or crowding < best[0]:
            best = (crowding, at, rect)
        if crowding == 0:
            break
    assert best is not None
    taken.append(best[2])
    return best[1]


def render_svg(table: TableCoverage, *, standalone: bool = False) -> str:
    """The state diagram of ``table`` as one ``<svg>`` element.

    ``standalone`` adds the XML namespace a ``.svg`` file needs; inline in HTML it is left out
    (and with it the page's only ``http`` URL).
    """
    recorded = table.recorded
    columns = _columns(table)
    column_of = {state: c for c, column in enumerate(columns) for state in column}
    loops: dict[str, list[RowCoverage]] = {}
    pairs: dict[frozenset[str], list[RowCoverage]] = {}
    for row in table.rows:
        if row.source == row.target:
            loops.setdefault(row.source, []).append(row)
        else:
            pairs.setdefault(frozenset((row.source, row.target)), []).append(row)

    # Column widths, and gaps wide enough for the labels of the edges crossing them.
    widths = [max(96.0, *(_text_width(s, _STATE_FONT) + 28 for s in column)) for column in columns]
    gaps = [_MIN_COL_GAP] * max(len(columns) - 1, 0)
    for rows in pairs.values():
        for row in rows:
            lo, hi = sorted((column_of[row.source], column_of[row.target]))
            if hi - lo == 1:
                needed = _text_width(_label(row, recorded), _LABEL_FONT) + 90
                gaps[lo] = max(gaps[lo], needed)

    # Boxes: each state gets room above it for its own loops.
    xs: list[float] = []
    x = 36.0  # room for the initial dot
    for c, width in enumerate(widths):
        xs.append(x)
        x += width + (gaps[c] if c < len(gaps) else 0)

    def pad(state: str) -> float:
        n = len(loops.get(state, ()))
        return n * _LOOP_STEP + 18 if n else 0.0

    heights = [
        sum(pad(s) + _BOX_H for s in column) + _V_GAP * (len(column) - 1) for column in columns
    ]
    tallest = max(heights)
    boxes: dict[str, _Box] = {}
    for c, column in enumerate(columns):
        y = (tallest - heights[c]) / 2
        for state in column:
            y += pad(state)
            width = _text_width(state, _STATE_FONT) + 28
            width = max(width, 96.0)
            boxes[state] = _Box(xs[c] + (widths[c] - width) / 2, y, width, _BOX_H)
            y += _BOX_H + _V_GAP
    top = min(box.y for box in boxes.values())

    edges: list[_Edge] = []
    for state, rows in loops.items():
        box = boxes[state]
        for k, row in enumerate(rows):
            h = 30 + k * _LOOP_STEP
            x1, x2, y0 = box.cx - 12 - 6 * k, box.cx + 12 + 6 * k, box.y
            p: _Path = ((x1, y0), (x1 - 18 - 4 * k, y0 - h), (x2 + 18 + 4 * k, y0 - h), (x2, y0))
            edges.append(_Edge(row, p, "middle", 0, -4, fixed=True))
    long_k = 0
    for rows in pairs.values():
        ordered = sorted(rows, key=lambda r: (column_of[r.source] > column_of[r.target], r.index))
        n = len(ordered)
        for k, row in enumerate(ordered):
            offset = k - (n - 1) / 2
            a, b = boxes[row.source], boxes[row.target]
            ca, cb = column_of[row.source], column_of[row.target]
            if abs(ca - cb) == 1:
                forward = ca < cb
                start = (a.right if forward else a.x, a.cy + offset * 12)
                end = (b.x if forward else b.right, b.cy + offset * 12)
                dx = (end[0] - start[0]) / 2
                p = (
                    start,
                    (start[0] + dx, start[1] + offset * _FAN),
                    (end[0] - dx, end[1] + offset * _FAN),
                    end,
                )
                edges.append(_Edge(row, p, "middle", 0, -5))
            elif ca == cb:
                bulge = xs[ca] + widths[ca] + 36 + (k * 18)
                start, end = (a.right, a.cy), (b.right, b.cy)
                p = (start, (bulge, start[1]), (bulge, end[1]), end)
                edges.append(_Edge(row, p, "start", 6, 4))
            else:
                lift = top - 40 - long_k * 24
                long_k += 1
                start, end = (a.cx + 8, a.y), (b.cx - 8, b.y)
                p = (start, (start[0], lift), (end[0], lift), end)
                edges.append(_Edge(row, p, "middle", 0, -5))

    # Labels: loops' at their tops, then the others where they crowd nothing already placed.
    taken: list[_Rect] = [(b.x - 2, b.y - 2, b.right + 2, b.y + b.h + 2) for b in boxes.values()]
    for edge in sorted(edges, key=lambda e: (not e.fixed, e.row.index)):
        text = _label(edge.row, recorded)
        if edge.fixed:
            x, y = _bezier(edge.path, 0.5)
            edge.label_at = (x + edge.dx, y + edge.dy)
            taken.append(_label_rect(text, edge.label_at, edge.anchor))
        else:
            edge.label_at = _place(
                text, edge.path, anchor=edge.anchor, dx=edge.dx, dy=edge.dy, taken=taken
            )

    # The canvas: everything drawn, labels included, plus a margin.
    points = [(box.x, box.y) for box in boxes.values()]
    points += [(box.right, box.y + box.h) for box in boxes.values()]
    initial = boxes[table.initial]
    points.append((initial.x - 30, initial.cy))
    for edge in edges:
        points.extend(edge.path)
        width = _text_width(_label(edge.row, recorded), _LABEL_FONT)
        lx, ly = edge.label_at
        left = lx - width / 2 if edge.anchor == "middle" else lx
        points += [(left, ly - _LABEL_FONT), (left + width, ly + 3)]
    min_x = min(p[0] for p in points) - _MARGIN
    min_y = min(p[1] for p in points) - _MARGIN
    max_x = max(p[0] for p in points) + _MARGIN
    max_y = max(p[1] for p in points) + _MARGIN
    view_w, view_h = max_x - min_x, max_y - min_y

    name = html.escape(table.name)
    ident = "dh-" + "".join(ch if ch.isalnum() else "-" for ch in table.name)
    out: list[str] = []
    xmlns = ' xmlns="http://www.w3.org/2000/svg"' if standalone else ""
    out.append(
        f'<svg{xmlns} class="machine-diagram" data-table="{name}" role="img" '
        f'aria-labelledby="{ident}-title" '
        f'viewBox="{_fmt(min_x)} {_fmt(min_y)} {_fmt(view_w)} {_fmt(view_h)}" '
        f'width="{_fmt(view_w)}" height="{_fmt(view_h)}" '
        f'font-family="{html.escape(_MONO)}">'
    )
    summary = (
        f"{len(table.rows) - len(table.uncovered)} of {len(table.rows)} rows taken"
        if recorded
        else "no coverage recorded"
    )
    out.append(
        f'<title id="{ident}-title">The {name} state machine ({html.escape(table.source)}): '
        f"{len(table.states)} states, {len(table.rows)} transitions, {summary}</title>"
    )
    out.append("<defs>")
    for kind, colour in _COLOURS.items():
        out.append(
            f'<marker id="{ident}-arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="8" markerHeight="8" markerUnits="userSpaceOnUse" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        )
    out.append("</defs>")

    # Initial marker.
    dot_x = initial.x - 26
    out.append(
        f'<g class="initial-marker"><circle cx="{_fmt(dot_x)}" cy="{_fmt(initial.cy)}" r="6" '
        f'fill="#263238"/><path d="M{_fmt(dot_x + 6)},{_fmt(initial.cy)} '
        f'L{_fmt(initial.x - 1)},{_fmt(initial.cy)}" stroke="#263238" stroke-width="1.5" '
        f'marker-end="url(#{ident}-arrow-unrecorded)"/></g>'
    )

    reached = table.reached_states
    for state in table.states:
        box = boxes[state]
        kinds = ["state"]
        if state == table.initial:
            kinds.append("initial")
        if state in table.terminal:
            kinds.append("terminal")
        unreached = recorded and state not in reached
        if unreached:
            kinds.append("unreached")
        fill, ink, dash = (
            ("#f1f1f1", "#8a8a8a", ' stroke-dasharray="4 3"')
            if unreached
            else (
                "#e8f0fe",
                "#1a2b3c",
                "",
            )
        )
        escaped = html.escape(state)
        out.append(f'<g class="{" ".join(kinds)}" data-state="{escaped}">')
        out.append(
            f'<rect x="{_fmt(box.x)}" y="{_fmt(box.y)}" width="{_fmt(box.w)}" '
            f'height="{_fmt(box.h)}" rx="10" fill="{fill}" stroke="{ink}" '
            f'stroke-width="1.5"{dash}/>'
        )
        if state in table.terminal:
            out.append(
                f'<rect x="{_fmt(box.x + 4)}" y="{_fmt(box.y + 4)}" width="{_fmt(box.w - 8)}" '
                f'height="{_fmt(box.h - 8)}" rx="7" fill="none" stroke="{ink}" '
                f'stroke-width="1"{dash}/>'
            )
        out.append(
            f'<text x="{_fmt(box.cx)}" y="{_fmt(box.cy + _STATE_FONT * 0.35)}" '
            f'text-anchor="middle" font-size="{_fmt(_STATE_FONT)}" fill="{ink}">{escaped}</text>'
        )
        out.append("</g>")

    for edge in sorted(edges, key=lambda e: e.row.index):
        row = edge.row
        kind = "unrecorded" if not recorded else ("covered" if row.count else "never")
        colour = _COLOURS[kind]
        width = 1.5 if kind != "covered" else 1.5 + min(2.5, math.log10(row.count + 1))
        dash = ' stroke-dasharray="6 4"' if kind == "never" else ""
        weight = ' font-weight="bold"' if kind == "never" else ""
        p = edge.path
        d = (
            f"M{_fmt(p[0][0])},{_fmt(p[0][1])} C{_fmt(p[1][0])},{_fmt(p[1][1])} "
            f"{_fmt(p[2][0])},{_fmt(p[2][1])} {_fmt(p[3][0])},{_fmt(p[3][1])}"
        )
        label = _label(row, recorded)
        count = f": taken {row.count} times" if recorded else ""
        out.append(
            f'<g class="edge {kind}" data-row="{row.index}" data-count="{row.count}">'
            f"<title>#{row.index} {html.escape(row.source)} → {html.escape(row.target)} on "
            f"{html.escape(row.label)}{count} ({html.escape(row.requirement)})</title>"
            f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="{_fmt(width)}"{dash} '
            f'marker-end="url(#{ident}-arrow-{kind})"/>'
            f'<text x="{_fmt(edge.label_at[0])}" y="{_fmt(edge.label_at[1])}" '
            f'text-anchor="{edge.anchor}" font-size="{_fmt(_LABEL_FONT)}" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="3" paint-order="stroke"{weight}>'
            f"{html.escape(label)}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)
