"""Time against energy over a search's candidates: each correct candidate whose evaluation measured both (under
`--objective energy` or `edp` every one does), the Pareto front of them, and one line that says whether the
fastest kernel is also the most frugal.

Each candidate's time and J/call are taken relative to eager's in the same evaluation (its speedup, and the
reference's J/call over its own), so drift between evaluations does not move the points.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    node: int
    move: str
    time_ratio: float  # the candidate's time over eager's, in the same evaluation (1 / speedup)
    energy_ratio: float  # the candidate's J/call over eager's, in the same evaluation
    spread: float  # (max - min) / median of the candidate's J/call over its windows, and of eager's, added


def points(rows: list[dict]) -> list[Point]:
    """The correct candidates of a search's evaluations (the store's rows) that carry both measurements."""
    found = []
    for row in rows:
        result = row.get("result") or {}
        energy = result.get("energy")
        if row.get("verdict") != "correct" or not energy or not result.get("speedup"):
            continue
        reference, candidate = energy["reference"]["j_per_call"], energy["candidate"]["j_per_call"]
        if reference <= 0 or candidate <= 0:
            continue
        found.append(Point(node=row["node_id"], move=row.get("move") or "", time_ratio=1.0 / result["speedup"],
                           energy_ratio=candidate / reference,
                           spread=energy.get("reference_spread", 0.0) + energy.get("candidate_spread", 0.0)))
    return found


def front(found: list[Point]) -> list[Point]:
    """The points no other point beats in both time and energy, fastest first."""
    best_energy, kept = float("inf"), []
    for point in sorted(found, key=lambda p: (p.time_ratio, p.energy_ratio)):
        if point.energy_ratio < best_energy:
            kept.append(point)
            best_energy = point.energy_ratio
    return kept


def fastest_and_frugal(found: list[Point]) -> tuple[Point, Point] | None:
    if not found:
        return None
    return min(found, key=lambda p: (p.time_ratio, p.energy_ratio)), \
        min(found, key=lambda p: (p.energy_ratio, p.time_ratio))


def summary(found: list[Point]) -> str | None:
    """One line: the fastest kernel is the most frugal, or within the windows' spread of it, or what the most
    frugal one saves and what it costs in time. None without points."""
    pair = fastest_and_frugal(found)
    if pair is None:
        return None
    fastest, frugal = pair
    if fastest.node == frugal.node:
        return (f"the fastest kernel (node {fastest.node}) is also the most frugal: {fastest.time_ratio:.3f}x "
                f"eager's time, {fastest.energy_ratio:.3f}x its energy per call")
    apart = fastest.energy_ratio / frugal.energy_ratio - 1
    noise = max(fastest.spread, frugal.spread)
    if apart <= noise:
        return (f"the fastest kernel (node {fastest.node}) is as frugal as the most frugal (node {frugal.node}) "
                f"within the noise: {apart:.1%} more energy per call, inside the windows' spread of {noise:.1%}")
    return (f"the most frugal kernel (node {frugal.node}) takes {1 - 1 / (1 + apart):.1%} less energy per call than "
            f"the fastest (node {fastest.node}), at {frugal.time_ratio / fastest.time_ratio:.2f}x its time")


def svg(found: list[Point], width: int = 560, height: int = 340) -> str:
    """Every point (time ratio across, energy ratio up), eager at (1, 1), the Pareto front as a line, the
    fastest and the most frugal marked."""
    left, bottom, top, right = 60, 45, 15, 150
    xs = [p.time_ratio for p in found] + [1.0]
    ys = [p.energy_ratio for p in found] + [1.0]
    x_low, x_high = min(xs) * 0.95, max(xs) * 1.05
    y_low, y_high = min(ys) * 0.95, max(ys) * 1.05
    x = lambda v: left + (width - left - right) * (v - x_low) / (x_high - x_low)  # noqa: E731
    y = lambda v: height - bottom - (height - bottom - top) * (v - y_low) / (y_high - y_low)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="time against energy" class="plot" id="tradeoff">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#333"/>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{left}" y2="{top}" stroke="#333"/>',
             f'<text x="{(left + width - right) / 2}" y="{height - 10}" text-anchor="middle" font-size="12">'
             "time per call / eager's</text>",
             f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" font-size="12" '
             f'transform="rotate(-90 14 {(top + height - bottom) / 2})">energy per call / eager\'s</text>']
    for value in (x_low, 1.0, x_high):
        parts.append(f'<text x="{x(value):.1f}" y="{height - bottom + 16}" text-anchor="middle" '
                     f'font-size="10">{value:.2f}</text>')
    for value in (y_low, 1.0, y_high):
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="10">{value:.2f}</text>')
    edge = front(found)
    if len(edge) > 1:
        path = " ".join(f"{x(p.time_ratio):.1f},{y(p.energy_ratio):.1f}" for p in edge)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#ef6c00" stroke-width="1.5" class="front"/>')
    parts.append(f'<rect x="{x(1.0) - 4:.1f}" y="{y(1.0) - 4:.1f}" width="8" height="8" fill="#777">'
                 f'<title>eager</title></rect>'
                 f'<text x="{x(1.0) + 8:.1f}" y="{y(1.0) + 4:.1f}" font-size="11">eager</text>')
    for p in found:
        parts.append(f'<circle cx="{x(p.time_ratio):.1f}" cy="{y(p.energy_ratio):.1f}" r="4" fill="#1e88e5" '
                     f'class="point"><title>node {p.node} ({_escape(p.move)}): {p.time_ratio:.3f}x time, '
                     f'{p.energy_ratio:.3f}x energy</title></circle>')
    pair = fastest_and_frugal(found)
    if pair:
        fastest, frugal = pair
        marks = [(fastest, "fastest and most frugal", -8)] if fastest == frugal else \
            [(fastest, "fastest", -8), (frugal, "most frugal", 4)]
        for point, label, dy in marks:
            parts.append(f'<circle cx="{x(point.time_ratio):.1f}" cy="{y(point.energy_ratio):.1f}" r="8" fill="none" '
                         f'stroke="#000" class="marked"/><text x="{x(point.time_ratio) + 12:.1f}" '
                         f'y="{y(point.energy_ratio) + dy:.1f}" font-size="11">{label} (node {point.node})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
