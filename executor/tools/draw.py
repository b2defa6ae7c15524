"""A picture of a plan: the DAG in layers, each step coloured by its decision.

Steps a `--cache-from` plan sets aside (`Plan.standby`: neither run nor copied, because every step
that reads them is copied or complete) are drawn too, greyed and labelled "not needed", so the
picture shows the whole DAG and why those steps do nothing.

`draw_plan(plan, path)` writes `.html` (self-contained: inline SVG with hover titles, a legend
and a table), `.svg` (the same drawing) or `.png` (matplotlib, no network, no graphviz). Layers
are longest-path depths from the sources; steps within a layer are ordered by the mean position
of their dependencies (a few barycentre sweeps) to keep edges short.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from executor.core.errors import ExecutorError
from executor.core.plan import Action, Decision, Plan

COLORS = {Action.RUN: "#f5c542", Action.SKIP: "#7cc47f", Action.WAIT: "#5bc0de",
          Action.BLOCKED: "#e57373", Action.STOP: "#b71c1c", Action.COPY: "#7fa7e5"}
STANDBY_LABEL, STANDBY_COLOR = "not needed", "#d0d0d0"
BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 220, 46, 40, 60, 20


@dataclass(frozen=True)
class Box:
    digest: str
    name: str
    step_id: str
    action: Action
    reason: str
    x: float  # top-left corner, in pixels
    y: float
    standby: bool = False  # set aside by a --cache-from plan: "not needed here"


def _steps(plan: Plan) -> dict[str, Decision]:
    """Every step to draw: the plan's decisions and the steps it set aside (--cache-from)."""
    return {**plan.decisions, **plan.standby}


def _depths(steps: dict[str, Decision]) -> dict[str, int]:
    """Longest-path depth from the sources. Set-aside steps come after the decisions in `steps`
    though they lie upstream, so no order is assumed; a stack, not recursion: chains may be long."""
    def deps_of(digest: str) -> list[str]:
        node = steps[digest].node
        return [dep for dep in (*node.deps, *node.weak_deps) if dep in steps]

    depth: dict[str, int] = {}
    for root in steps:
        stack = [root]
        while stack:
            digest = stack[-1]
            waiting = [dep for dep in deps_of(digest) if dep not in depth]
            if waiting:
                stack.extend(waiting)
                continue
            stack.pop()
            depth[digest] = 1 + max((depth[dep] for dep in deps_of(digest)), default=-1)
    return depth


def layout(plan: Plan) -> tuple[list[Box], list[tuple[str, str]], float, float]:
    """Boxes, edges (dependency digest, dependent digest), width and height."""
    steps = _steps(plan)
    edges = [(dep, d) for d, decision in steps.items()
             for dep in (*decision.node.deps, *decision.node.weak_deps) if dep in steps]
    depth = _depths(steps)
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for digest in steps:
        layers[depth[digest]].append(digest)
    position = {d: i for layer in layers for i, d in enumerate(layer)}
    parents = {d: [a for a, b in edges if b == d] for d in steps}
    for _ in range(4):
        for layer in layers[1:]:
            layer.sort(key=lambda d: (sum(position[p] for p in parents[d]) / len(parents[d])
                                      if parents[d] else position[d]))
            position.update({d: i for i, d in enumerate(layer)})
    widest = max((len(layer) for layer in layers), default=1)
    width = 2 * MARGIN + widest * BOX_W + (widest - 1) * GAP_X
    height = 2 * MARGIN + len(layers) * BOX_H + max(0, len(layers) - 1) * GAP_Y
    boxes = []
    for row, layer in enumerate(layers):
        offset = (width - (len(layer) * BOX_W + (len(layer) - 1) * GAP_X)) / 2
        for i, digest in enumerate(layer):
            d = steps[digest]
            boxes.append(Box(digest, d.node.name, d.node.step_id, d.action, d.reason,
                             offset + i * (BOX_W + GAP_X), MARGIN + row * (BOX_H + GAP_Y),
                             standby=digest in plan.standby))
    return boxes, edges, width, height


def _short_id(step_id: str) -> str:
    return step_id.rsplit("-", 1)[-1]


def _fit(text: str, chars: int = 30) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def paint_by_decision(decision: Decision) -> tuple[str, str]:
    return decision.action.value, COLORS[decision.action]


def render_svg(plan: Plan, paint: Callable[[Decision], tuple[str, str]] = paint_by_decision) -> str:
    """The DAG as inline SVG; `paint` gives each step its (label, fill colour): the plan's decision
    by default, a run's outcome in the run report."""
    boxes, edges, width, height = layout(plan)
    at = {b.digest: b for b in boxes}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
             f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>']
    for a, b in edges:
        src, dst = at[a], at[b]
        x1, y1, x2, y2 = src.x + BOX_W / 2, src.y + BOX_H, dst.x + BOX_W / 2, dst.y
        parts.append(f'<path class="edge" data-from="{html.escape(src.step_id)}" data-to="{html.escape(dst.step_id)}" '
                     f'd="M {x1:.1f} {y1:.1f} C {x1:.1f} {y1 + GAP_Y / 2:.1f}, {x2:.1f} {y2 - GAP_Y / 2:.1f}, '
                     f'{x2:.1f} {y2:.1f}" fill="none" stroke="#555" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for b in boxes:
        label, fill = (STANDBY_LABEL, STANDBY_COLOR) if b.standby else paint(plan.decisions[b.digest])
        title = html.escape(f"{b.step_id}\n{b.reason}" if b.standby else f"{b.step_id}\n{label}: {b.reason}")
        text_color = "#fff" if fill in ("#b71c1c",) else "#111"
        action = "standby" if b.standby else b.action.value
        parts.append(
            f'<g class="node" data-step-id="{html.escape(b.step_id)}" data-action="{action}" '
            f'data-label="{html.escape(label)}">'
            f'<title>{title}</title>'
            f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{fill}" '
            f'stroke="#333"/>'
            f'<text x="{b.x + BOX_W / 2:.1f}" y="{b.y + 19:.1f}" text-anchor="middle" font-size="13" '
            f'fill="{text_color}">{html.escape(_fit(b.name))}</text>'
            f'<text x="{b.x + BOX_W / 2:.1f}" y="{b.y + 36:.1f}" text-anchor="middle" font-size="11" '
            f'fill="{text_color}">{html.escape(_short_id(b.step_id))} · {html.escape(label)}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


def _legend(plan: Plan) -> list[tuple[str, str]]:
    """(label, colour) of every decision, and of "not needed" when the plan set steps aside."""
    return [(a.value, c) for a, c in COLORS.items()] + ([(STANDBY_LABEL, STANDBY_COLOR)] if plan.standby else [])


def render_html(plan: Plan, title: str = "the plan: an action per step") -> str:
    legend = " ".join(f'<span style="background:{c};padding:2px 8px;border-radius:4px;margin-right:6px">'
                      f'{label}</span>' for label, c in _legend(plan))
    rows = "\n".join(f"<tr><td>{html.escape(d.node.name)}</td><td><code>{html.escape(d.node.step_id)}</code></td>"
                     f"<td>{STANDBY_LABEL if digest in plan.standby else d.action.value}</td>"
                     f"<td>{html.escape(d.reason)}</td></tr>"
                     for digest, d in _steps(plan).items())
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;margin:20px} td,th{padding:2px 10px;text-align:left}"
            "g.node:hover rect{stroke-width:3}</style></head><body>"
            f"<h2>{html.escape(title)}</h2><p>{legend} (hover a step for its id and reason)</p>\n"
            f"{render_svg(plan)}\n<table><tr><th>step</th><th>id</th><th>action</th><th>reason</th></tr>\n"
            f"{rows}\n</table></body></html>\n")


def render_png(plan: Plan, path: Path, dpi: int = 100) -> None:
    from executor.core.extras import require_extra

    require_extra("draw", "drawing a plan as .png", "matplotlib")
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # no pyplot: no GUI backend, faster import
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

    boxes, edges, width, height = layout(plan)
    at = {b.digest: b for b in boxes}
    fig = Figure(figsize=(width / dpi, (height + 40) / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height + 40, 0)
    ax.axis("off")
    for a, b in edges:
        src, dst = at[a], at[b]
        ax.add_patch(FancyArrowPatch((src.x + BOX_W / 2, src.y + BOX_H), (dst.x + BOX_W / 2, dst.y),
                                     arrowstyle="-|>", mutation_scale=12, color="#555", lw=1.2))
    for b in boxes:
        ax.add_patch(FancyBboxPatch((b.x, b.y), BOX_W, BOX_H, boxstyle="round,pad=0,rounding_size=6",
                                    facecolor=COLORS[b.action], edgecolor="#333"))
        color = "#fff" if b.action == Action.STOP else "#111"
        ax.text(b.x + BOX_W / 2, b.y + 18, _fit(b.name), ha="center", va="center", fontsize=9, color=color)
        ax.text(b.x + BOX_W / 2, b.y + 34, f"{_short_id(b.step_id)} · {b.action.value}", ha="center",
                va="center", fontsize=7.5, color=color)
    used = [a for a in COLORS if any(b.action == a for b in boxes)]
    ax.legend(handles=[Patch(facecolor=COLORS[a], edgecolor="#333", label=a.value) for a in used],
              loc="lower center", ncol=max(1, len(used)), fontsize=8, frameon=False)
    fig.savefig(path, dpi=dpi)


def draw_plan(plan: Plan, path: str | Path) -> Path:
    """Write the plan's picture; the format follows the file's suffix (.html, .svg, .png)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".html", ".htm", ".svg", ".png"):
        raise ExecutorError(f"--graph {path}: unknown picture format {suffix or '(none)'!r}; "
                            f"use a .html, .svg or .png file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".png":
        render_png(plan, path)
    elif suffix == ".svg":
        path.write_text(render_svg(plan) + "\n")
    else:
        path.write_text(render_html(plan))
    return path
