"""The state diagrams' geometry: no label crosses an edge, another label or a state box.

The checks read the SVG that ``render_svg`` writes, not the layout's own bookkeeping: every
``<path>`` of an edge is flattened into segments (lines as they are, Bézier curves sampled) and
thickened by half its stroke width, and every label becomes the rectangle its glyphs may cover,
measured with this file's own estimate of a monospace advance. So a layout that computes one
thing and draws another fails here too.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnosis_harness.conformance._diagram import TIMES, render_svg
from diagnosis_harness.conformance._report import (
    RowCoverage,
    TableCoverage,
    default_tables,
    table_coverage,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

Point = tuple[float, float]
Rect = tuple[float, float, float, float]  # left, top, right, bottom

ADVANCE = 0.62  # em; DejaVu Sans Mono, the monospace font Debian's Chromium uses, is 0.602
ASCENT, DESCENT = 1.0, 0.3  # em above and below the baseline, generous for brackets and signs
ARROW = 10.0  # the last stretch of a path under its arrowhead, drawn 8 wide
SAMPLES = 32  # points per Bézier curve

#: Counts as a real run leaves them: large, small, and never taken.
REALISTIC = {
    "lifecycle": {1: 1553, 2: 812, 3: 44, 4: 9, 5: 0},
    "budget": {1: 15530, 2: 1553, 3: 8123, 4: 0},
    "retry": {1: 1553, 2: 12, 3: 700, 4: 812, 5: 41, 6: 812, 7: 0},
}


@dataclass(frozen=True)
class Edge:
    row: int
    segments: list[tuple[Point, Point]]
    half_width: float


@dataclass(frozen=True)
class Label:
    row: int
    text: str
    rect: Rect


@dataclass(frozen=True)
class Drawing:
    view: Rect
    boxes: dict[str, Rect]
    edges: list[Edge]
    labels: list[Label]


def _numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]


def _flatten(d: str) -> list[tuple[Point, Point]]:
    """The segments of an SVG path made of absolute M, L, Q and C commands."""
    segments: list[tuple[Point, Point]] = []
    here: Point = (0.0, 0.0)
    for command, args in re.findall(r"([MLQC])([^MLQC]*)", d):
        values = _numbers(args)
        points = [(values[i], values[i + 1]) for i in range(0, len(values), 2)]
        if command == "M":
            here = points[0]
            continue
        size = {"L": 1, "Q": 2, "C": 3}[command]
        assert len(points) % size == 0, d
        for i in range(0, len(points), size):
            controls = [here, *points[i : i + size]]
            steps = 1 if size == 1 else SAMPLES
            previous = here
            for k in range(1, steps + 1):
                current = _bezier(controls, k / steps)
                segments.append((previous, current))
                previous = current
            here = controls[-1]
    return segments


def _bezier(controls: Sequence[Point], t: float) -> Point:
    points = list(controls)
    while len(points) > 1:  # de Casteljau
        points = [
            (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t)
            for a, b in itertools.pairwise(points)
        ]
    return points[0]


def _label_rect(text: ET.Element, font_size: float) -> Rect:
    content = "".join(text.itertext())
    width = len(content) * font_size * ADVANCE
    x, y = float(text.get("x") or 0), float(text.get("y") or 0)
    anchor = text.get("text-anchor") or "start"
    left = {"start": x, "middle": x - width / 2, "end": x - width}[anchor]
    return (left, y - ASCENT * font_size, left + width, y + DESCENT * font_size)


def parse(svg_text: str) -> Drawing:
    svg = ET.fromstring(svg_text)
    left, top, width, height = _numbers(svg.get("viewBox") or "")
    boxes: dict[str, Rect] = {}
    edges: list[Edge] = []
    labels: list[Label] = []
    for group in svg.iter("g"):
        kinds = (group.get("class") or "").split()
        if "state" in kinds:
            rect = group.find("rect")
            assert rect is not None
            x, y = float(rect.get("x") or 0), float(rect.get("y") or 0)
            w, h = float(rect.get("width") or 0), float(rect.get("height") or 0)
            boxes[group.get("data-state") or ""] = (x, y, x + w, y + h)
        elif "edge" in kinds:
            row = int(group.get("data-row") or 0)
            path, text = group.find("path"), group.find("text")
            assert path is not None
            assert text is not None
            edges.append(
                Edge(row, _flatten(path.get("d") or ""), float(path.get("stroke-width") or 1) / 2)
            )
            size = float(text.get("font-size") or 0)
            labels.append(Label(row, "".join(text.itertext()), _label_rect(text, size)))
    return Drawing((left, top, left + width, top + height), boxes, edges, labels)


def _grow(rect: Rect, by: float) -> Rect:
    return (rect[0] - by, rect[1] - by, rect[2] + by, rect[3] + by)


def _rects_meet(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _segment_meets(p: Point, q: Point, rect: Rect) -> bool:
    """Whether segment pq has a point strictly inside ``rect`` (Liang-Barsky clipping)."""
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for delta, low, high, start in ((dx, rect[0], rect[2], p[0]), (dy, rect[1], rect[3], p[1])):
        if delta == 0:
            if not low < start < high:
                return False
            continue
        a, b = (low - start) / delta, (high - start) / delta
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
        if t0 >= t1:
            return False
    return True


def _edge_meets(edge: Edge, rect: Rect) -> bool:
    """Whether the drawn stroke, arrowhead included, covers part of ``rect``."""
    thick = _grow(rect, edge.half_width)
    if any(_segment_meets(p, q, thick) for p, q in edge.segments):
        return True
    arrow = _grow(rect, 4.0)
    to_go = ARROW
    for p, q in reversed(edge.segments):  # the stretch under the arrowhead, from the end back
        length = math.dist(p, q)
        f = min(1.0, to_go / length) if length else 1.0  # of this segment, only its last part
        if _segment_meets((q[0] + (p[0] - q[0]) * f, q[1] + (p[1] - q[1]) * f), q, arrow):
            return True
        to_go -= length
        if to_go <= 0:
            break
    return False


def _labels_crossed(drawing: Drawing) -> tuple[list[str], list[str], list[str]]:
    """Labels under an edge, on a box, and on another label."""
    crossed: list[str] = []
    on_box: list[str] = []
    on_label: list[str] = []
    for label in drawing.labels:
        crossed += [
            f"{label.text!r} crossed by row {edge.row}"
            for edge in drawing.edges
            if _edge_meets(edge, label.rect)
        ]
        on_box += [
            f"{label.text!r} on {name}"
            for name, box in drawing.boxes.items()
            if _rects_meet(label.rect, box)
        ]
    for i, a in enumerate(drawing.labels):
        on_label += [
            f"{a.text!r} on {b.text!r}"
            for b in drawing.labels[i + 1 :]
            if _rects_meet(a.rect, b.rect)
        ]
    return crossed, on_box, on_label


def _boxes_crossed(drawing: Drawing) -> tuple[list[str], list[str]]:
    """Edges through a box, and boxes on another box."""
    through: list[str] = []
    on_box: list[str] = []
    names = list(drawing.boxes)
    for i, name in enumerate(names):
        inside = _grow(drawing.boxes[name], -1.0)  # an edge may end on the border, not inside
        through += [
            f"row {edge.row} through {name}"
            for edge in drawing.edges
            if any(_segment_meets(p, q, inside) for p, q in edge.segments)
        ]
        on_box += [
            f"{name} on {other}"
            for other in names[i + 1 :]
            if _rects_meet(drawing.boxes[name], drawing.boxes[other])
        ]
    return through, on_box


def _outside(drawing: Drawing) -> list[str]:
    """Labels, boxes and edges not wholly inside the canvas."""
    view = drawing.view
    things = [(label.text, label.rect) for label in drawing.labels]
    things += list(drawing.boxes.items())
    for edge in drawing.edges:
        xs = [x for segment in edge.segments for x, _ in segment]
        ys = [y for segment in edge.segments for _, y in segment]
        things.append((f"row {edge.row}", (min(xs), min(ys), max(xs), max(ys))))
    return [
        what
        for what, rect in things
        if not (
            view[0] <= rect[0] <= rect[2] <= view[2] and view[1] <= rect[1] <= rect[3] <= view[3]
        )
    ]


def collisions(drawing: Drawing) -> dict[str, list[str]]:
    """What overlaps in ``drawing``, by kind; every list is empty for a good layout."""
    label_x_edge, label_x_box, label_x_label = _labels_crossed(drawing)
    edge_x_box, box_x_box = _boxes_crossed(drawing)
    return {
        "label x edge": label_x_edge,
        "label x label": label_x_label,
        "label x box": label_x_box,
        "edge x box": edge_x_box,
        "box x box": box_x_box,
        "outside the canvas": _outside(drawing),
    }


def assert_clean(svg: str, rows: int) -> None:
    drawing = parse(svg)
    assert len(drawing.edges) == len(drawing.labels) == rows
    found = {kind: hits for kind, hits in collisions(drawing).items() if hits}
    assert not found, found


# --- the checker itself, on drawings made by hand -------------------------------------------


def _svg(*parts: str) -> str:
    return f'<svg viewBox="0 0 400 200">{"".join(parts)}</svg>'


STATE_A = '<g class="state" data-state="A"><rect x="10" y="80" width="60" height="40"/></g>'
STATE_B = '<g class="state" data-state="B"><rect x="300" y="80" width="60" height="40"/></g>'


def _edge(d: str, label: str, x: float, y: float, *, row: int = 1) -> str:
    return (
        f'<g class="edge covered" data-row="{row}"><path d="{d}" stroke-width="2"/>'
        f'<text x="{x}" y="{y}" text-anchor="middle" font-size="11">{label}</text></g>'
    )


def test_the_checker_finds_a_label_struck_through_by_an_edge() -> None:
    struck = _svg(STATE_A, STATE_B, _edge("M70,100 L300,100", f"reserve {TIMES}1553", 185, 104))
    assert collisions(parse(struck))["label x edge"] == [f"'reserve {TIMES}1553' crossed by row 1"]
    above = _svg(STATE_A, STATE_B, _edge("M70,100 L300,100", f"reserve {TIMES}1553", 185, 93))
    assert not any(collisions(parse(above)).values())


def test_the_checker_finds_a_curve_through_a_label_and_labels_on_each_other() -> None:
    curve = _edge("M70,90 C185,0 185,200 300,110", "a", 100, 60)
    other = _edge("M70,110 L300,110", "stop · never", 185, 92, row=2)
    found = collisions(parse(_svg(STATE_A, STATE_B, curve, other)))
    assert found["label x edge"] == ["'stop · never' crossed by row 1"]
    twin = _edge("M70,110 L300,110", "stop · never", 190, 95, row=3)
    found = collisions(parse(_svg(STATE_A, STATE_B, other, twin)))
    assert found["label x label"] == ["'stop · never' on 'stop · never'"]


def test_the_checker_finds_labels_on_boxes_and_edges_through_boxes() -> None:
    on_box = _edge("M70,100 L300,100", f"succeed {TIMES}9", 30, 95)
    found = collisions(parse(_svg(STATE_A, STATE_B, on_box)))
    assert found["label x box"] == [f"'succeed {TIMES}9' on A"]
    through = _edge("M0,100 L400,100", "x", 185, 80)
    assert collisions(parse(_svg(STATE_A, STATE_B, through)))["edge x box"] == [
        "row 1 through A",
        "row 1 through B",
    ]


def test_the_checker_counts_the_arrowhead() -> None:
    arrow = _edge("M70,100 L296,100", "x", 185, 80)
    label = '<g class="edge covered" data-row="2"><path d="M0,0 L1,0"/>'
    label += '<text x="294" y="110" text-anchor="start" font-size="11">y</text></g>'
    assert collisions(parse(_svg(arrow, label)))["label x edge"] == ["'y' crossed by row 1"]


# --- the three machines and harder tables -------------------------------------------------


@pytest.mark.parametrize("recorded", [True, False], ids=["counts", "no-coverage"])
@pytest.mark.parametrize("name", ["lifecycle", "budget", "retry"])
def test_the_machines_have_no_collisions(name: str, recorded: bool) -> None:
    (table,) = (t for t in default_tables() if t.name == name)
    coverage = table_coverage(table, REALISTIC[name] if recorded else None)
    svg = render_svg(coverage)
    assert_clean(svg, len(table.rows))
    if recorded:
        assert f"{TIMES}{max(REALISTIC[name].values())}</text>" in svg
        assert "· never</text>" in svg


def _title(element: ET.Element) -> str:
    title = element.find("title")
    assert title is not None, element.attrib
    return "".join(title.itertext())


def test_every_state_and_edge_has_a_title_for_a_screen_reader_or_a_pointer() -> None:
    (retry,) = (t for t in default_tables() if t.name == "retry")
    coverage = table_coverage(retry, {**REALISTIC["retry"], 2: 0})
    svg = ET.fromstring(render_svg(coverage))
    assert _title(svg).endswith(": 6 states, 7 transitions, 5 of 7 rows taken")
    titles = {
        g.get("data-state") or g.get("data-row"): _title(g)
        for g in svg.iter("g")
        if g.get("data-state") or g.get("data-row")
    }
    assert len(titles) == len(coverage.states) + len(coverage.rows)
    assert titles["READY"] == "READY: initial state"
    assert titles["ATTEMPTING"] == "ATTEMPTING"
    assert titles["FAILED"] == "FAILED: terminal state"
    assert titles["STOPPED"] == "STOPPED: terminal state, never reached"
    assert titles["7"].startswith("#7 AWAITING_RETRY → STOPPED on stop: taken 0 times (")


def _table(
    rows: Sequence[tuple[str, str, str, str | None, int]],
    *,
    states: Sequence[str] | None = None,
    recorded: bool = True,
) -> TableCoverage:
    names = list(states or [])
    for source, _, target, _, _ in rows:
        names += [s for s in (source, target) if s not in names]
    return TableCoverage(
        name="synthetic",
        source="tests/synthetic.py",
        states=tuple(names),
        initial=names[0],
        terminal=frozenset(names[-1:]),
        rows=tuple(
            RowCoverage(
                index=i,
                source=source,
                event=event,
                target=target,
                guard=guard.lstrip("!") if guard else None,
                expect=not (guard or "").startswith("!"),
                requirement="Synthetic",
                count=count,
            )
            for i, (source, event, target, guard, count) in enumerate(rows, start=1)
        ),
        recorded=recorded,
    )


CROWDED = (
    # parallel edges both ways between one pair, with long guards and counts
    ("IDLE", "reserve", "BUSY", "within_limits", 1553),
    ("IDLE", "reserve", "BUSY", "!within_limits", 0),
    ("IDLE", "record_usage", "BUSY", "within_limits", 15530),
    ("IDLE", "record_usage", "BUSY", "!within_limits", 1234567),
    ("IDLE", "start", "BUSY", None, 9),
    ("BUSY", "release", "IDLE", None, 812),
    ("BUSY", "release", "IDLE", "!quiet", 0),
    ("BUSY", "abandon", "IDLE", "retry_allowed", 41),
    # self-loops stacked on three states
    ("IDLE", "tick", "IDLE", None, 1553),
    ("IDLE", "tick", "IDLE", "!within_limits", 0),
    ("IDLE", "heartbeat_with_a_long_name", "IDLE", "a_rather_long_guard", 99999),
    ("IDLE", "poll", "IDLE", None, 3),
    ("BUSY", "tick", "BUSY", None, 0),
    ("BUSY", "progress", "BUSY", "within_limits", 700),
    ("DONE", "linger", "DONE", None, 0),
    # rows between states of one depth, a long edge forward and long ones back
    ("BUSY", "pause", "PAUSED", None, 12),
    ("BUSY", "wait", "WAITING", None, 5),
    ("PAUSED", "wait", "WAITING", None, 0),
    ("WAITING", "pause", "PAUSED", "!impatient", 7),
    ("PAUSED", "finish", "DONE", None, 1),
    ("WAITING", "finish", "DONE", None, 1553),
    ("DONE", "reopen", "IDLE", None, 0),
    ("WAITING", "restart", "IDLE", "retry_allowed", 44),
    ("IDLE", "skip", "DONE", None, 2),
    # a state the table cannot reach, with rows out of it
    ("ORPHAN", "adopt", "IDLE", None, 0),
    ("ORPHAN", "adopt", "DONE", "!quiet", 0),
)


@pytest.mark.parametrize("recorded", [True, False], ids=["counts", "no-coverage"])
def test_a_crowded_table_has_no_collisions(recorded: bool) -> None:
    table = _table(CROWDED, recorded=recorded)
    assert_clean(render_svg(table), len(table.rows))


def test_a_table_of_one_state_and_no_rows() -> None:
    table = TableCoverage(
        name="single",
        source="s.py",
        states=("ONLY",),
        initial="ONLY",
        terminal=frozenset(),
        rows=(),
        recorded=False,
    )
    drawing = parse(render_svg(table))
    assert list(drawing.boxes) == ["ONLY"]
    assert not any(collisions(drawing).values())


NAMES = ["A", "READY", "AWAITING_RETRY", "BUDGET_EXHAUSTED", "X1", "STOPPED", "Q"]
EVENTS = ["go", "reserve", "record_usage", "fail", "exhaust_budget", "t"]
GUARDS = [None, "within_limits", "!within_limits", "retry_allowed", "!a_rather_long_guard"]
COUNTS = [0, 1, 9, 44, 1553, 15530, 1234567]


@st.composite
def tables(draw: st.DrawFn) -> TableCoverage:
    states = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6, unique=True))
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(states),
                st.sampled_from(EVENTS),
                st.sampled_from(states),
                st.sampled_from(GUARDS),
                st.sampled_from(COUNTS),
            ),
            max_size=14,
        )
    )
    return _table(rows, states=states, recorded=draw(st.booleans()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_any_table_has_no_collisions(table: TableCoverage) -> None:
    assert_clean(render_svg(table), len(table.rows))


def _enclosing(a: Rect, b: Rect) -> Rect:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


# --- the estimate of a label's size, measured in a real browser ---------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MEASURE = """<script>
for (const element of document.querySelectorAll("g.edge text, g.edge path")) {
  const box = element.getBBox();
  element.setAttribute("data-bbox", [box.x, box.y, box.width, box.height].join(" "));
}
</script>"""


@pytest.mark.version_independent
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium on PATH: measuring the labels in a browser needs Debian's chromium "
    "package (apt-get install chromium)",
)
def test_the_browser_draws_every_label_and_edge_inside_the_checked_geometry(
    tmp_path: Path,
) -> None:
    """What the checks above assume of the font (a label's rectangle) and of the paths (their
    flattening) holds for the boxes Chromium itself computes."""
    assert CHROMIUM is not None
    svgs = [render_svg(table_coverage(table, REALISTIC[table.name])) for table in default_tables()]
    svgs.append(render_svg(_table(CROWDED)))
    page = tmp_path / "diagrams.html"
    page.write_text(
        f"<!doctype html><meta charset=utf-8><body>{''.join(svgs)}{MEASURE}</body>",
        encoding="utf-8",
    )
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    drawn = re.findall(r"<svg\b.*?</svg>", done.stdout, re.S)
    assert len(drawn) == len(svgs)
    measured = 0
    for ours, theirs in zip(svgs, drawn, strict=True):
        drawing = parse(ours)
        boxes = re.findall(r'<(text|path)\b[^>]*data-bbox="([^"]+)"', theirs)
        texts = [_numbers(b) for kind, b in boxes if kind == "text"]
        paths = [_numbers(b) for kind, b in boxes if kind == "path"]
        assert len(texts) == len(paths) == len(drawing.labels)
        for label, (x, y, w, h) in zip(drawing.labels, texts, strict=True):
            glyphs = (x, y, x + w, y + h)
            assert _grow(label.rect, 0.5) == _enclosing(_grow(label.rect, 0.5), glyphs), label
        for edge, (x, y, w, h) in zip(drawing.edges, paths, strict=True):
            xs = [p[0] for segment in edge.segments for p in segment]
            ys = [p[1] for segment in edge.segments for p in segment]
            ours_box = (min(xs), min(ys), max(xs), max(ys))
            assert ours_box == pytest.approx((x, y, x + w, y + h), abs=0.5), edge.row
        measured += len(texts)
    assert measured > 40
