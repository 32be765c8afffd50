"""report.md and report.html of a search run.

The HTML is one self-contained file: inline CSS and inline SVG plots (speedup
against evaluations, the search tree coloured by verdict, per-kernel time before
and after against the floor, energy when measured) and the techniques that worked.
No script, no external resource.
"""

from __future__ import annotations

import html as _html

from kernelpro import tradeoff
from kernelpro.mcts.records import Status
from kernelpro.mcts.search import Search

COLORS = {"correct": "#2e7d32", "incorrect": "#c62828", "rejected": "#6a1b9a", "compile_error": "#ef6c00",
          "load_error": "#ef6c00", "runtime_error": "#d84315", "crash": "#b71c1c", "timeout": "#795548",
          "reference": "#1565c0", None: "#9e9e9e"}


def esc(value) -> str:
    return _html.escape(str(value))


def _fmt(value, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def technique_rows(rows: list[dict], search: Search) -> list[dict]:
    """Per move: tries, correct ones, and the best gain over the parent (x)."""
    table: dict[str, dict] = {}
    for row in rows:
        entry = table.setdefault(row["move"], {"move": row["move"], "technique": ", ".join(row["techniques"]),
                                               "tries": 0, "correct": 0, "best_gain": None})
        entry["tries"] += 1
        if row["verdict"] == "correct" and row["ratio"]:
            entry["correct"] += 1
            parent = search.nodes[search.nodes[row["node_id"]].parent]
            gain = row["ratio"] / (parent.ratio or 1.0)
            entry["best_gain"] = gain if entry["best_gain"] is None else max(entry["best_gain"], gain)
    return sorted(table.values(), key=lambda e: -(e["best_gain"] or 0))


def _summary_pairs(doc: dict) -> list[tuple[str, str]]:
    pairs = [("problem", doc["problem"]), ("device", f"{doc['device_name']} ({doc['device']})"),
             ("torch", doc["torch_version"]), ("objective", doc["objective"]), ("coder", doc["coder"]),
             ("strategy", doc["strategy"]), ("precision / policy", f"{doc['precision']} / {doc['policy']}"),
             ("evaluations", f"{doc['evaluations']} of {doc['budget']} (stopped: {doc['stopped']})"),
             ("reference (eager)", f"{doc['baseline_ms']:.4f} ms, in its own evaluation"),
             # the ratio names the two timings it divides: the best's and eager's in the best's own evaluation
             ("best", f"{doc['best_ms']:.4f} ms, {doc['speedup']:.3f}x vs eager "
                      f"({doc.get('best_reference_ms') or doc['baseline_ms']:.4f} ms, timed in the same evaluation)"),
             ("moves", " + ".join(doc["best_moves"]) or "(reference)")]
    final = doc.get("final")
    if final:
        pairs.append(("re-measured after the search",
                      f"{final['best_ms']:.4f} ms, {final['speedup']:.3f}x vs eager ({final['eager_ms']:.4f} ms)"
                      + (f", {final['speedup_vs_compile']:.3f}x vs torch.compile ({final['compile_ms']:.4f} ms)"
                         if final.get("speedup_vs_compile") else "")))
    elif doc.get("speedup_vs_compile"):  # a run.json from before the re-measurement was kept whole
        pairs.append(("re-measured after the search", f"{doc['final_speedup']:.3f}x vs eager, "
                                                       f"{doc['speedup_vs_compile']:.3f}x vs torch.compile"))
    rejected = doc.get("rejected_best")
    if rejected:
        from kernelpro.energy.objectives import unconfirmed
        # a run.json from before "why" rejected under time only
        why = rejected.get("why") or unconfirmed("time", rejected["final"]["speedup"], None)
        pairs.append(("rejected after re-measurement", f"{' + '.join(rejected['moves'])}: {rejected['speedup']:.3f}x in "
                      f"the search, {why}; the reference is kept"))
    if doc.get("energy"):
        from kernelpro.energy.objectives import describe
        pairs.append(("energy", describe(doc["energy"])))
    if doc.get("time_and_energy"):
        pairs.append(("time and energy", doc["time_and_energy"]))
    pairs.append(("verdicts", ", ".join(f"{k} {v}" for k, v in sorted(doc["verdicts"].items()))))
    if doc.get("moves_ruled_out"):
        pairs.append(("not offered", "; ".join(f"{move}: {why}" for move, why in doc["moves_ruled_out"].items())))
    if doc.get("evaluations_per_minute"):
        pairs.append(("throughput", f"{doc['evaluations_per_minute']:.1f} evaluations/min"
                                    + where_the_time_went(doc.get("time_split_s"), doc["wall_s"])))
    usage = doc.get("coder_usage")
    if usage:
        cost = "cost unknown" if usage["cost_usd"] is None else f"about ${usage['cost_usd']:.2f}"
        pairs.append(("LLM coder", f"{usage['requests']} requests; tokens {usage['input_tokens']} in, "
                                   f"{usage['output_tokens']} out, {usage['cache_read_tokens']} cached; {cost}; "
                                   f"{doc.get('coder_failures', 0)} expansions failed"))
    return pairs


def where_the_time_went(split: dict | None, wall_s: float) -> str:
    """`time_split_s` in words: `; of 12 s: reference 3.4 s, coder 1.4 s, ...` (a run.json from before the
    phases were split has coder, evaluations and builds only)."""
    if not split:
        return ""
    phases = split.get("phases") or {}
    inside = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items() if seconds >= 0.05)
    if "harness" in split:
        inside += f"{', ' if inside else ''}worker start and hand-over {split['harness']:.1f} s"
    parts = [f"{name} {split[name]:.1f} s" for name in ("reference", "profile", "coder") if name in split]
    inside = inside or f"native builds {split.get('builds', 0.0):.1f} s"
    parts.append(f"evaluations {split['evaluations']:.1f} s ({inside})")
    if "other" in split:
        parts.append(f"other {split['other']:.1f} s")
    final = f"; then the re-measurement {split['final']:.1f} s" if split.get("final") else ""
    return f"; of {wall_s:.0f} s: " + ", ".join(parts) + final


def _kernels(profile: dict | None, limit: int = 8) -> list[dict]:
    kernels = sorted((profile or {}).get("kernels", []), key=lambda k: -k["ms_per_call"])
    return kernels[:limit]


def _profiled(doc: dict, profiles: dict) -> list[tuple[str, list[dict]]]:
    """(title, top kernels) for the reference and, when it is another node, the best."""
    nodes = [("reference", 0)] + ([("best", doc["best_node"])] if doc["best_node"] else [])
    return [(title, kernels) for title, node_id in nodes if (kernels := _kernels(profiles.get(node_id)))]


def markdown(doc: dict, rows: list[dict], search: Search, profiles: dict) -> str:
    lines = ["# kernelpro search report", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _summary_pairs(doc)]
    lines += ["", "## Best speedup by evaluation", "", "| evaluation | move | verdict | ratio | best so far |",
              "|---|---|---|---|---|"]
    best = 1.0
    for index, row in enumerate(rows, 1):
        best = max(best, row["ratio"] or 0)
        lines.append(f"| {index} | {row['move']} | {row['verdict']} | {_fmt(row['ratio'])} | {best:.3f} |")
    lines += ["", "## Techniques", "", "| move | technique | tries | correct | best gain over parent |",
              "|---|---|---|---|---|"]
    for entry in technique_rows(rows, search):
        lines.append(f"| {entry['move']} | {entry['technique']} | {entry['tries']} | {entry['correct']} | "
                     f"{_fmt(entry['best_gain'], 3, 'x')} |")
    for title, kernels in _profiled(doc, profiles):
        lines += ["", f"## Kernels of the {title} (profiled)", "", "| kernel | ms/call | share | class | floor ms |",
                  "|---|---|---|---|---|"]
        lines += [f"| `{k['name'][:70]}` | {k['ms_per_call']:.4f} | {k['time_share']:.0%} | "
                  f"{k['roofline_class']} | {_fmt(k.get('floor_ms'), 4)} |" for k in kernels]
    guidance = (profiles.get(0) or {}).get("guidance")
    if guidance:
        lines += ["", "## Guidance for the reference", "", guidance]
    lines += ["", "## Search tree", "", "```", search.render(), "```", "", tree_legend(search), ""]
    return "\n".join(lines)


def tree_legend(search: Search) -> str:
    """What the tree's nodes count: the reference, the evaluations, and the repeats that were not evaluated."""
    repeats = sum(node.transposition_of is not None for node in search.nodes)
    pending = sum(node.status is Status.PENDING and node.transposition_of is None for node in search.nodes[1:])
    evaluated = len(search.nodes) - 1 - repeats - pending
    text = f"#0 is the reference; {evaluated} candidate node(s), one per evaluation"
    if pending:
        text += f"; {pending} `pending` node(s) were being evaluated when the search stopped"
    if repeats:
        text += (f"; {repeats} node(s) marked `= #N` are the candidate of node #N reached by the same moves in another "
                 "order, not evaluated again")
    return text + "."


# -- SVG plots --------------------------------------------------------------------------------------
def svg_history(rows: list[dict], width: int = 640, height: int = 260) -> str:
    left, bottom, top, right = 50, 35, 15, 15
    count = max(1, len(rows))
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    high = max([1.0] + ratios) * 1.1
    x = lambda i: left + (width - left - right) * (i / count)  # noqa: E731
    y = lambda v: height - bottom - (height - bottom - top) * (v / high)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="speedup against evaluations" class="plot">',
             f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="#333"/>',
             f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="{top}" stroke="#333"/>',
             f'<line x1="{left}" y1="{y(1):.1f}" x2="{width - right}" y2="{y(1):.1f}" stroke="#1565c0" '
             'stroke-dasharray="4 3"/>',
             f'<text x="{left - 6}" y="{y(1) + 4:.1f}" text-anchor="end" font-size="11">1.0x</text>',
             f'<text x="{left - 6}" y="{top + 8}" text-anchor="end" font-size="11">{high:.2f}x</text>',
             f'<text x="{(width + left) / 2}" y="{height - 5}" text-anchor="middle" font-size="12">evaluations</text>']
    best, points = 1.0, [(x(0), y(1.0))]
    for index, row in enumerate(rows, 1):
        if row["ratio"]:
            best = max(best, row["ratio"])
            parts.append(f'<circle cx="{x(index):.1f}" cy="{y(row["ratio"]):.1f}" r="4" '
                         f'fill="{COLORS["correct"]}"><title>{esc(row["move"])}: {row["ratio"]:.3f}x</title></circle>')
        else:
            parts.append(f'<text x="{x(index):.1f}" y="{y(0) - 4:.1f}" text-anchor="middle" font-size="12" '
                         f'fill="{COLORS.get(row["verdict"], "#900")}">&#215;<title>{esc(row["move"])}: '
                         f'{esc(row["verdict"])}</title></text>')
        points.append((x(index), y(best)))
    path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
    parts.append(f'<polyline points="{path}" fill="none" stroke="#2e7d32" stroke-width="2"/>')
    parts.append("</svg>")
    return "".join(parts)


def svg_tree(search: Search, width: int = 900) -> str:
    depth_of: dict[int, list[int]] = {}
    for node in search.nodes:
        if node.status.value != "pending":
            depth_of.setdefault(node.depth, []).append(node.id)
    levels = max(depth_of) + 1 if depth_of else 1
    widest = max(len(ids) for ids in depth_of.values()) if depth_of else 1
    width = max(width, 90 * widest)
    height = 70 * levels + 30
    position = {}
    for depth, ids in depth_of.items():
        for index, node_id in enumerate(ids):
            position[node_id] = (width * (index + 0.5) / len(ids), 30 + 70 * depth)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             'aria-label="search tree" class="plot">']
    for node_id, (px, py) in position.items():
        parent = search.nodes[node_id].parent
        if parent is not None and parent in position:
            qx, qy = position[parent]
            parts.append(f'<line x1="{qx:.1f}" y1="{qy:.1f}" x2="{px:.1f}" y2="{py:.1f}" stroke="#bbb"/>')
    for node_id, (px, py) in position.items():
        node = search.nodes[node_id]
        payload = node.payload or {}
        verdict = payload.get("verdict", "reference" if node.parent is None else None)
        label = payload.get("move") or "reference"
        value = f"{node.ratio:.2f}x" if node.ratio else (verdict or "")
        ring = ' stroke="#000" stroke-width="3"' if node_id == search.best_id else ""
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="9" fill="{COLORS.get(verdict, "#9e9e9e")}"{ring}>'
                     f'<title>#{node_id} {esc(label)}: {esc(value)} {esc(node.failure)}</title></circle>'
                     f'<text x="{px:.1f}" y="{py + 22:.1f}" text-anchor="middle" font-size="10">'
                     f'{esc(label[:22])} {esc(value)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def svg_bars(groups: list[tuple[str, list[tuple[str, float, float | None]]]], unit: str, width: int = 760) -> str:
    """Horizontal bars: groups of (label, value, floor or None); the floor is a black tick."""
    items = [(g, *item) for g, values in groups for item in values]
    if not items:
        return ""
    high = max(max(v, f or 0) for _, _, v, f in items) or 1.0
    left, row_h = 330, 22
    height = row_h * (len(items) + len(groups)) + 20
    scale = lambda v: (width - left - 80) * v / high  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="bars in {esc(unit)}" class="plot">']
    y = 10
    for group, values in groups:
        parts.append(f'<text x="4" y="{y + 14}" font-size="12" font-weight="bold">{esc(group)}</text>')
        y += row_h
        for label, value, floor in values:
            parts.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end" font-size="11">'
                         f'{esc(label[:48])}</text><rect x="{left}" y="{y + 3}" width="{max(1.0, scale(value)):.1f}" '
                         f'height="{row_h - 8}" fill="#64b5f6"><title>{value:.4g} {esc(unit)}</title></rect>'
                         f'<text x="{left + scale(value) + 4:.1f}" y="{y + 14}" font-size="11">{value:.4g}</text>')
            if floor:
                parts.append(f'<line x1="{left + scale(floor):.1f}" y1="{y + 1}" x2="{left + scale(floor):.1f}" '
                             f'y2="{y + row_h - 3}" stroke="#000" stroke-width="2"><title>floor {floor:.4g} '
                             f'{esc(unit)}</title></line>')
            y += row_h
    parts.append("</svg>")
    return "".join(parts)


def html(doc: dict, rows: list[dict], search: Search, profiles: dict) -> str:
    summary = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in _summary_pairs(doc))
    kernel_groups = [(title, [(k["name"], k["ms_per_call"], k.get("floor_ms")) for k in kernels])
                     for title, kernels in _profiled(doc, profiles)]
    kernels_svg = svg_bars(kernel_groups, "ms per call") if kernel_groups else \
        "<p>No kernel profile (run without --no-profile to get one).</p>"
    energy = doc.get("energy")
    energy_svg = svg_bars([("joules per call", [("reference", energy["reference"]["j_per_call"], None),
                                                ("best", energy["candidate"]["j_per_call"], None)])], "J") \
        if energy else "<p>Energy was not measured (objective time).</p>"
    found = tradeoff.points(rows)
    if found:
        energy_svg += ("<p>Each correct candidate's time and energy per call, each against eager's in the same "
                       "evaluation; line: the Pareto front; ringed: the fastest and the most frugal. "
                       f"{esc((doc.get('time_and_energy') or '').capitalize())}.</p>" + tradeoff.svg(found))
    techniques = "".join(
        f"<tr><td>{esc(e['move'])}</td><td>{esc(e['technique'])}</td><td>{e['tries']}</td><td>{e['correct']}</td>"
        f"<td>{_fmt(e['best_gain'], 3, 'x')}</td></tr>" for e in technique_rows(rows, search))
    legend = " ".join(f'<span style="color:{c}">&#9679; {esc(v)}</span>' for v, c in COLORS.items() if v)
    guidance = esc((profiles.get(0) or {}).get("guidance") or "no guidance")
    title = f"kernelpro: {doc['speedup']:.2f}x on {doc['problem']}"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }}
table {{ border-collapse: collapse; margin: 8px 0 18px; }}
th, td {{ border: 1px solid #ddd; padding: 4px 8px; text-align: left; font-size: 13px; }}
th {{ background: #f5f5f5; }} h2 {{ margin-top: 28px; }} .plot {{ background: #fff; border: 1px solid #eee; }}
pre {{ background: #f7f7f7; padding: 10px; white-space: pre-wrap; font-size: 12px; }}
</style></head><body>
<h1 id="title">{esc(title)}</h1>
<table id="summary">{summary}</table>
<h2>Speedup against evaluations</h2>
<p>Dots: correct candidates (objective ratio); crosses: failed ones; line: best so far.</p>
{svg_history(rows)}
<h2>Search tree</h2><p>{legend}; ringed: the best. {esc(tree_legend(search).replace("`", ""))}</p>
<div style="overflow-x:auto">{svg_tree(search)}</div>
<h2>Per-kernel time, before and after, against the floor</h2>
<p>Bars: ms per call from the profiler; black tick: the kernel's roofline floor.</p>
{kernels_svg}
<h2>Energy</h2>
{energy_svg}
<h2>Techniques that worked</h2>
<table id="techniques"><tr><th>move</th><th>technique</th><th>tries</th><th>correct</th><th>best gain over parent</th></tr>
{techniques}</table>
<h2>Guidance for the reference</h2><pre>{guidance}</pre>
</body></html>
"""
