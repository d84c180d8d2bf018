"""SVG state diagrams of the machine tables, with transition coverage drawn on the edges.

Theory of operation. A layered layout, computed in pure Python (no Graphviz, so the report needs
no system package), built so that no label can touch an edge, another label or a state box:

* **Columns.** A state's column is its breadth-first depth from the initial state (states the
  table cannot reach go last). Rows between two states of one depth would have nowhere to run, so
  each depth is split into as many columns as the longest chain of such rows needs. An edge
  spanning several columns passes through the ones between on a slot of its own (a *dummy*),
  stacked with the states; within a column, slots are ordered by the mean position of their
  neighbours to keep crossings few.
* **Gaps and lanes.** Between two columns lies a gap with three zones: a curve zone on each side
  and a straight zone in the middle. Every edge crossing the gap owns a *lane*: a horizontal line
  through the straight zone, reached by monotone S-curves in the curve zones. An edge's label sits
  just above its lane in the straight zone, which is made wider than its widest label; the lane
  above a labelled lane is at least a label's height higher. So in the straight zone there are
  only horizontal lines and labels above them, never a curve, and nothing crosses a label.
* **Ports.** Edges leave and enter boxes on their left and right sides only, ordered like their
  lanes; a short horizontal stub runs from the box to the edge of its column, inside the box's
  height, where nothing else is drawn.
* **Self-loops** stand on the box's top, side by side, the leftmost tallest; each label starts
  right of its loop's top, where every loop to the right is lower than the label's bottom. The
  column is made wide enough for these labels, so they stay out of the gaps.

Each label is ``event [guard]``, followed by ``TIMES`` and the count, or by ``· never``, when
coverage was recorded. The initial state has a filled dot and arrow, terminal states a double
border. With coverage, rows never taken are red and dashed and states never reached are greyed.
Every piece of text is escaped and every edge has a ``<title>``. The SVG needs no stylesheet,
script or font file: presentation attributes only. The canvas is the bounding box of all drawn.
"""

from __future__ import annotations

import html
import math
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._report import RowCoverage, TableCoverage

__all__ = ["render_svg"]

_STATE_FONT = 13.0
_LABEL_FONT = 11.0
_CHAR = 0.61  # advance of a monospace glyph, in em (DejaVu Sans Mono: 0.602)
_MONO = "ui-monospace, 'DejaVu Sans Mono', Menlo, Consolas, monospace"

_BOX_H = 40.0  # least height of a state box
_BOX_W = 96.0  # least width
_PORT_GAP = 8.0  # between two edges on one side of a box
_V_GAP = 40.0  # between two slots of a column
_COLUMN_PAD = 6.0  # between the widest thing in a column and the gap
_LANE_LABELLED = 24.0  # from a labelled lane up to the next lane: the label lies between
_LANE_PLAIN = 10.0  # from a lane without a label up to the next one
_LABEL_LIFT = 7.0  # from a lane up to its label's baseline
_LABEL_PAD = 10.0  # between a label and the ends of its straight zone
_MIN_STRAIGHT = 24.0
_MIN_CURVE, _MAX_CURVE = 24.0, 110.0  # width of a curve zone
_LOOP_W = 14.0
_LOOP_GAP = 8.0
_LOOP_INSET = 12.0  # from the box's left edge to the first loop
_LOOP_BASE = 20.0  # height of the lowest loop
_LOOP_STEP = 18.0  # each loop further left is this much taller
_LOOP_R = 5.0  # corner radius of a loop
_MARGIN = 16.0

TIMES = "\u00d7"  # the multiplication sign before a count

_COLOURS = {
    "covered": "#2e7d32",
    "never": "#c62828",
    "unrecorded": "#455a64",
}

_Point = tuple[float, float]
_Rect = tuple[float, float, float, float]  # left, top, right, bottom
_Slot = str | tuple[int, int]  # a state, or a dummy: (row index, column)


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
class _Path:
    """A path from ``start``: each part is ``(end,)`` a line, ``(c, end)`` a quadratic and
    ``(c1, c2, end)`` a cubic Bézier, as in SVG's L, Q and C commands."""

    start: _Point
    parts: list[tuple[_Point, ...]] = field(default_factory=list)

    @property
    def end(self) -> _Point:
        return self.parts[-1][-1] if self.parts else self.start

    def line(self, to: _Point) -> None:
        if to != self.end:
            self.parts.append((to,))

    def s_curve(self, to: _Point) -> None:
        """Horizontal at both ends; x grows (or shrinks) monotonically between them."""
        (x0, y0), (x1, y1) = self.end, to
        if y0 == y1:
            self.line(to)
        else:
            mid = (x0 + x1) / 2
            self.parts.append(((mid, y0), (mid, y1), to))

    def d(self) -> str:
        out = [f"M{_pt(self.start)}"]
        out += ["LQC"[len(part) - 1] + " ".join(_pt(p) for p in part) for part in self.parts]
        return " ".join(out)

    def points(self) -> list[_Point]:
        """Every end and control point: their bounding box holds the curve."""
        return [self.start, *(p for part in self.parts for p in part)]


@final
@dataclass(slots=True)
class _Edge:
    row: RowCoverage
    path: _Path
    label_at: _Point
    anchor: str  # text-anchor of the label: "middle" or "start"


@final
@dataclass(slots=True)
class _Crossing:
    """One edge's passage through the gap right of column ``gap``."""

    row: RowCoverage
    gap: int
    rightward: bool
    left: _Slot  # its end in column ``gap``
    right: _Slot  # its end in column ``gap + 1``
    labelled: bool
    lane: float = 0.0
    y_left: float = 0.0  # where it meets its left end
    y_right: float = 0.0


@final
@dataclass(frozen=True, slots=True)
class _Layout:
    boxes: dict[str, _Box]
    edges: list[_Edge]
    view: _Rect


def _text_width(text: str, size: float) -> float:
    return len(text) * size * _CHAR


def _fmt(value: float) -> str:
    text = f"{value:.1f}".rstrip("0").rstrip(".")
    return "0" if text in {"", "-0"} else text


def _pt(p: _Point) -> str:
    return f"{_fmt(p[0])},{_fmt(p[1])}"


def _label(row: RowCoverage, recorded: bool) -> str:
    if not recorded:
        return row.label
    return f"{row.label} {TIMES}{row.count}" if row.count else f"{row.label} · never"


def _label_rect(text: str, at: _Point, anchor: str) -> _Rect:
    """The box a label's glyphs may cover: a font size above its baseline, 3 units below."""
    width = _text_width(text, _LABEL_FONT)
    left = at[0] - width / 2 if anchor == "middle" else at[0]
    return (left - 2, at[1] - _LABEL_FONT, left + width + 2, at[1] + 3)


def _columns(table: TableCoverage) -> list[list[str]]:
    """States by breadth-first depth from the initial state, unreachable ones last; a depth with
    rows among its own states is split so that every row joins two different columns."""
    successors: dict[str, list[str]] = {state: [] for state in table.states}
    for row in table.rows:
        if row.target != row.source and row.target not in successors[row.source]:
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
    for state in table.states:
        depth.setdefault(state, last)
    order = list(depth)  # breadth-first, then the unreachable in the enum's order
    columns: list[list[str]] = []
    for level in sorted(set(depth.values())):
        members = [state for state in order if depth[state] == level]
        offset = _sublayers(members, successors)
        base = len(columns)
        columns.extend([] for _ in range(max(offset.values()) + 1))
        for state in members:
            columns[base + offset[state]].append(state)
    return columns


def _sublayers(members: list[str], successors: dict[str, list[str]]) -> dict[str, int]:
    """Longest-path layers of the rows among ``members``, back edges of a depth-first search
    left out: every row between two members then joins two different layers."""
    inside = set(members)
    finished: list[str] = []
    on_stack: set[str] = set()
    seen: set[str] = set()
    back: set[tuple[str, str]] = set()

    def visit(state: str) -> None:
        seen.add(state)
        on_stack.add(state)
        for target in successors[state]:
            if target not in inside:
                continue
            if target in on_stack:
                back.add((state, target))
            elif target not in seen:
                visit(target)
        on_stack.discard(state)
        finished.append(state)

    for state in members:
        if state not in seen:
            visit(state)
    offset = dict.fromkeys(members, 0)
    for state in reversed(finished):  # a topological order of the rows without back edges
        for target in successors[state]:
            if target in inside and (state, target) not in back:
                offset[target] = max(offset[target], offset[state] + 1)
    return offset


def _crossings(
    table: TableCoverage, column_of: dict[str, int]
) -> tuple[list[_Crossing], dict[int, list[_Crossing]]]:
    """Every gap crossing of every row that is not a self-loop, and each row's crossings from
    its source to its target; the first one carries the label."""
    everything: list[_Crossing] = []
    chains: dict[int, list[_Crossing]] = {}
    for row in table.rows:
        if row.source == row.target:
            continue
        cs, ct = column_of[row.source], column_of[row.target]
        step = 1 if ct > cs else -1
        slots: list[_Slot] = [row.source]
        slots += [(row.index, c) for c in range(cs + step, ct, step)]
        slots.append(row.target)
        chain = []
        for k in range(len(slots) - 1):
            near, far = slots[k], slots[k + 1]
            gap = min(cs + k * step, cs + (k + 1) * step)
            left, right = (near, far) if step == 1 else (far, near)
            chain.append(_Crossing(row, gap, step == 1, left, right, labelled=k == 0))
        chains[row.index] = chain
        everything.extend(chain)
    return everything, chains


def _order(columns: list[list[_Slot]], crossings: list[_Crossing]) -> None:
    """Sort each column's slots by the mean position of their neighbours, two sweeps each way."""

    def sort(c: int, look_left: bool) -> None:
        position = {slot: i for column in columns for i, slot in enumerate(column)}
        total: dict[_Slot, float] = {}
        count: dict[_Slot, int] = {}
        for x in crossings:
            if look_left and x.gap == c - 1:
                me, other = x.right, x.left
            elif not look_left and x.gap == c:
                me, other = x.left, x.right
            else:
                continue
            total[me] = total.get(me, 0.0) + position[other]
            count[me] = count.get(me, 0) + 1
        columns[c].sort(
            key=lambda s: (total[s] / count[s] if s in count else position[s], position[s])
        )

    for _ in range(2):
        for c in range(1, len(columns)):
            sort(c, look_left=True)
        for c in range(len(columns) - 2, -1, -1):
            sort(c, look_left=False)


def _pack(desired: Sequence[float], gaps: Sequence[float]) -> list[float]:
    """Positions as near ``desired`` (ascending) as keeps position i at least ``gaps[i]`` below
    position i - 1: pushed apart top-down, then shifted together by the mean displacement."""
    placed: list[float] = []
    for want, gap in zip(desired, gaps, strict=True):
        placed.append(want if not placed else max(want, placed[-1] + gap))
    if not placed:
        return placed
    shift = sum(p - w for p, w in zip(placed, desired, strict=True)) / len(placed)
    return [p - shift for p in placed]


@final
class _Layouter:
    """The layout of one table, computed in phases, one method each, in the order of
    :meth:`layout`: columns and slots, sizes, vertical stacking, lanes, ports, horizontal
    widths, then the boxes and edges drawn from them and the canvas around them.

    Invariant: every attribute is set once, by the phase that owns it, before any later phase
    reads it; :meth:`layout` runs the phases once (a ``_Layouter`` lays out one table once).
    """

    def __init__(self, table: TableCoverage) -> None:
        self.table = table
        self.recorded = table.recorded
        self.states = _columns(table)
        column_of = {state: c for c, column in enumerate(self.states) for state in column}
        self.crossings, self.chains = _crossings(table, column_of)
        self.columns = self._slots()
        self.loops = self._loops()
        self.ports = self._ports()
        self.size: dict[str, tuple[float, float]] = {}
        self.above: dict[str, float] = {}  # room over a box for its loops and their labels
        self.top_of: dict[_Slot, float] = {}  # a box's top; a dummy's line
        self.by_gap: list[list[_Crossing]] = []
        self.col_box: list[float] = []
        self.col_w: list[float] = []
        self.curve: list[float] = []
        self.straight: list[float] = []
        self.col_x: list[float] = []
        self.boxes: dict[str, _Box] = {}

    def layout(self) -> _Layout:
        self._size_boxes()
        self._stack()
        self._route_lanes()
        self._place_ports()
        self._widen_columns()
        self._widen_gaps()
        self._place_boxes()
        edges = self._loop_edges() + self._row_edges()
        return _Layout(self.boxes, sorted(edges, key=lambda e: e.row.index), self._view(edges))

    # --- columns and slots ------------------------------------------------------------------

    def _slots(self) -> list[list[_Slot]]:
        """Each column's states, then the dummies where an edge passes through it, ordered."""
        columns: list[list[_Slot]] = [list(column) for column in self.states]
        for x in self.crossings:
            for slot in (x.left, x.right):
                if isinstance(slot, tuple) and slot not in columns[slot[1]]:
                    columns[slot[1]].append(slot)
        _order(columns, self.crossings)
        return columns

    def _loops(self) -> dict[str, list[RowCoverage]]:
        loops: dict[str, list[RowCoverage]] = {}
        for row in self.table.rows:
            if row.source == row.target:
                loops.setdefault(row.source, []).append(row)
        return loops

    def _ports(self) -> dict[tuple[str, str], list[_Crossing]]:
        """The crossings attached to each (state, side) of a box."""
        ports: dict[tuple[str, str], list[_Crossing]] = {}
        for x in self.crossings:
            if isinstance(x.left, str):
                ports.setdefault((x.left, "right"), []).append(x)
            if isinstance(x.right, str):
                ports.setdefault((x.right, "left"), []).append(x)
        return ports

    # --- sizes and vertical placement -------------------------------------------------------

    def _size_boxes(self) -> None:
        """Boxes fit their name, their loops' feet and their ports."""
        for state in self.table.states:
            n = len(self.loops.get(state, ()))
            width = max(
                _BOX_W,
                _text_width(state, _STATE_FONT) + 28,
                _LOOP_INSET * 2 + n * (_LOOP_W + _LOOP_GAP),
            )
            sides = max(len(self.ports.get((state, side), ())) for side in ("left", "right"))
            self.size[state] = (width, max(_BOX_H, _PORT_GAP * (sides + 1)))
            self.above[state] = _LOOP_BASE + (n - 1) * _LOOP_STEP + _LABEL_FONT if n else 0.0

    def _extent(self, slot: _Slot) -> float:
        return self.above[slot] + self.size[slot][1] if isinstance(slot, str) else 0.0

    def _stack(self) -> None:
        """Each column's slots stacked, the columns centred on one another."""
        heights = [
            sum(self._extent(slot) for slot in column) + _V_GAP * (len(column) - 1)
            for column in self.columns
        ]
        tallest = max(heights)
        for c, column in enumerate(self.columns):
            y = (tallest - heights[c]) / 2
            for slot in column:
                self.top_of[slot] = y + (self.above[slot] if isinstance(slot, str) else 0.0)
                y += self._extent(slot) + _V_GAP

    def _middle(self, slot: _Slot) -> float:
        return self.top_of[slot] + (self.size[slot][1] / 2 if isinstance(slot, str) else 0.0)

    # --- lanes and ports --------------------------------------------------------------------

    def _route_lanes(self) -> None:
        """Each crossing near the y of its end with fewer crossings in that gap, packed apart."""
        self.by_gap = [[] for _ in range(max(len(self.columns) - 1, 0))]
        for x in self.crossings:
            self.by_gap[x.gap].append(x)
        for lane_set in self.by_gap:
            self._pack_lanes(lane_set)

    def _pack_lanes(self, lane_set: list[_Crossing]) -> None:
        degree: dict[_Slot, int] = {}
        for x in lane_set:
            degree[x.left] = degree.get(x.left, 0) + 1
            degree[x.right] = degree.get(x.right, 0) + 1

        def desired(x: _Crossing) -> float:
            a, b = degree[x.left], degree[x.right]
            if a == b:
                return (self._middle(x.left) + self._middle(x.right)) / 2
            return self._middle(x.left) if a < b else self._middle(x.right)

        lane_set.sort(
            key=lambda x: (desired(x), self._middle(x.left), self._middle(x.right), x.row.index)
        )
        spacing = [_LANE_LABELLED if x.labelled else _LANE_PLAIN for x in lane_set]
        for x, lane in zip(lane_set, _pack([desired(x) for x in lane_set], spacing), strict=True):
            x.lane = lane

    def _place_ports(self) -> None:
        """Ports spread along each side of a box in the order of their lanes; dummies are lines."""
        for (state, side), attached in self.ports.items():
            attached.sort(key=lambda x: (x.lane, x.row.index))
            h = self.size[state][1]
            for k, x in enumerate(attached):
                y = self.top_of[state] + h * (k + 1) / (len(attached) + 1)
                if side == "right":
                    x.y_left = y
                else:
                    x.y_right = y
        for x in self.crossings:
            if not isinstance(x.left, str):
                x.y_left = self.top_of[x.left]
            if not isinstance(x.right, str):
                x.y_right = self.top_of[x.right]

    # --- horizontal placement ---------------------------------------------------------------

    def _widen_columns(self) -> None:
        """Columns as wide as their boxes and their loops' labels."""
        self.col_box = [max(self.size[s][0] for s in names) for names in self.states]
        for c, names in enumerate(self.states):
            right = self.col_box[c]
            for state in names:
                offset = (self.col_box[c] - self.size[state][0]) / 2
                for i, row in enumerate(self.loops.get(state, ())):
                    text = _label(row, self.recorded)
                    foot = _LOOP_INSET + i * (_LOOP_W + _LOOP_GAP) + _LOOP_W + 6
                    right = max(right, offset + foot + _text_width(text, _LABEL_FONT) + 2)
            self.col_w.append(right + _COLUMN_PAD)

    def _widen_gaps(self) -> None:
        """Gaps as wide as their labels and curves; then each column's left edge."""
        for lane_set in self.by_gap:
            rise = max(
                (abs(x.lane - y) for x in lane_set for y in (x.y_left, x.y_right)), default=0.0
            )
            self.curve.append(min(_MAX_CURVE, max(_MIN_CURVE, rise * 0.5)))
            widest = max(
                (
                    _text_width(_label(x.row, self.recorded), _LABEL_FONT)
                    for x in lane_set
                    if x.labelled
                ),
                default=0.0,
            )
            self.straight.append(max(_MIN_STRAIGHT, widest + 2 * _LABEL_PAD))
        self.col_x = [40.0]  # room for the initial dot
        for c in range(len(self.by_gap)):
            self.col_x.append(self.col_x[c] + self.col_w[c] + 2 * self.curve[c] + self.straight[c])

    def _place_boxes(self) -> None:
        for c, names in enumerate(self.states):
            for state in names:
                w, h = self.size[state]
                x = self.col_x[c] + (self.col_box[c] - w) / 2
                self.boxes[state] = _Box(x, self.top_of[state], w, h)

    # --- edges and canvas -------------------------------------------------------------------

    def _loop_edges(self) -> list[_Edge]:
        """Self-loops on each box's top, side by side, the leftmost tallest."""
        edges: list[_Edge] = []
        for state, rows in self.loops.items():
            box = self.boxes[state]
            n = len(rows)
            for i, row in enumerate(rows):
                a = box.x + _LOOP_INSET + i * (_LOOP_W + _LOOP_GAP)
                b = a + _LOOP_W
                top = box.y - _LOOP_BASE - (n - 1 - i) * _LOOP_STEP
                p = _Path((a, box.y))
                p.line((a, top + _LOOP_R))
                p.parts.append(((a, top), (a + _LOOP_R, top)))
                p.line((b - _LOOP_R, top))
                p.parts.append(((b, top), (b, top + _LOOP_R)))
                p.line((b, box.y))
                edges.append(_Edge(row, p, (b + 6, top + 4), "start"))
        return edges

    def _row_edges(self) -> list[_Edge]:
        """Every other row, through its chain of crossings, in the table's order."""
        return [
            self._row_edge(row, self.chains[row.index])
            for row in self.table.rows
            if row.index in self.chains
        ]

    def _row_edge(self, row: RowCoverage, chain: list[_Crossing]) -> _Edge:
        first = chain[0]
        source = self.boxes[row.source]
        if first.rightward:
            p = _Path((source.right, first.y_left))
        else:
            p = _Path((source.x, first.y_right))
        label_at = (0.0, 0.0)
        for x in chain:
            at = self._cross(p, x)
            if x.labelled:
                label_at = at
        target = self.boxes[row.target]
        p.line((target.x if chain[-1].rightward else target.right, p.end[1]))
        return _Edge(row, p, label_at, "middle")

    def _cross(self, p: _Path, x: _Crossing) -> _Point:
        """Extend ``p`` across the gap of ``x`` (and the dummy beyond it, if any); return where
        the label of ``x`` would sit: over the middle of its lane's straight zone."""
        g = x.gap
        left_edge, right_edge = self.col_x[g] + self.col_w[g], self.col_x[g + 1]
        straight_left, straight_right = left_edge + self.curve[g], right_edge - self.curve[g]
        if x.rightward:
            p.line((left_edge, x.y_left))
            p.s_curve((straight_left, x.lane))
            p.line((straight_right, x.lane))
            p.s_curve((right_edge, x.y_right))
        else:
            p.line((right_edge, x.y_right))
            p.s_curve((straight_right, x.lane))
            p.line((straight_left, x.lane))
            p.s_curve((left_edge, x.y_left))
        # through a dummy: across its column on its line
        far = x.right if x.rightward else x.left
        if isinstance(far, tuple):
            c = far[1]
            p.line(
                (self.col_x[c] + self.col_w[c] if x.rightward else self.col_x[c], self.top_of[far])
            )
        return ((straight_left + straight_right) / 2, x.lane - _LABEL_LIFT)

    def _view(self, edges: list[_Edge]) -> _Rect:
        """The canvas: everything drawn, labels included, plus a margin."""
        initial = self.boxes[self.table.initial]
        points = [(initial.x - 32, initial.cy - 6)]
        for box in self.boxes.values():
            points += [(box.x, box.y), (box.right, box.y + box.h)]
        for edge in edges:
            points += edge.path.points()
            rect = _label_rect(_label(edge.row, self.recorded), edge.label_at, edge.anchor)
            points += [(rect[0], rect[1]), (rect[2], rect[3])]
        return (
            min(p[0] for p in points) - _MARGIN,
            min(p[1] for p in points) - _MARGIN,
            max(p[0] for p in points) + _MARGIN,
            max(p[1] for p in points) + _MARGIN,
        )


def _layout(table: TableCoverage) -> _Layout:
    return _Layouter(table).layout()


def render_svg(table: TableCoverage, *, standalone: bool = False) -> str:
    """The state diagram of ``table`` as one ``<svg>`` element.

    ``standalone`` adds the XML namespace a ``.svg`` file needs; inline in HTML it is left out
    (and with it the page's only ``http`` URL).
    """
    recorded = table.recorded
    layout = _layout(table)
    boxes = layout.boxes
    min_x, min_y, max_x, max_y = layout.view
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
    out.append(
        "".join(
            f'<marker id="{ident}-arrow-{kind}" viewBox="0 0 10 10" refX="9" refY="5" '
            'markerWidth="8" markerHeight="8" markerUnits="userSpaceOnUse" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
            for kind, colour in _COLOURS.items()
        )
    )
    out.append("</defs>")

    # Initial marker.
    initial = boxes[table.initial]
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
            else ("#e8f0fe", "#1a2b3c", "")
        )
        escaped = html.escape(state)
        out.append(f'<g class="{" ".join(kinds)}" data-state="{escaped}">')
        roles = [
            *(["initial state"] if state == table.initial else []),
            *(["terminal state"] if state in table.terminal else []),
            *(["never reached"] if unreached else []),
        ]
        out.append(f"<title>{escaped}{': ' if roles else ''}{', '.join(roles)}</title>")
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

    for edge in layout.edges:
        row = edge.row
        kind = "unrecorded" if not recorded else ("covered" if row.count else "never")
        colour = _COLOURS[kind]
        width = 1.5 if kind != "covered" else 1.5 + min(2.5, math.log10(row.count + 1))
        dash = ' stroke-dasharray="6 4"' if kind == "never" else ""
        weight = ' font-weight="bold"' if kind == "never" else ""
        label = _label(row, recorded)
        count = f": taken {row.count} times" if recorded else ""
        out.append(
            f'<g class="edge {kind}" data-row="{row.index}" data-count="{row.count}">'
            f"<title>#{row.index} {html.escape(row.source)} → {html.escape(row.target)} on "
            f"{html.escape(row.label)}{count} ({html.escape(row.requirement)})</title>"
            f'<path d="{edge.path.d()}" fill="none" stroke="{colour}" '
            f'stroke-width="{_fmt(width)}"{dash} marker-end="url(#{ident}-arrow-{kind})"/>'
            f'<text x="{_fmt(edge.label_at[0])}" y="{_fmt(edge.label_at[1])}" '
            f'text-anchor="{edge.anchor}" font-size="{_fmt(_LABEL_FONT)}" fill="{colour}" '
            f'stroke="#ffffff" stroke-width="3" paint-order="stroke"{weight}>'
            f"{html.escape(label)}</text></g>"
        )
    out.append("</svg>")
    return "".join(out)
