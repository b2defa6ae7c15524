"""The run report: one self-contained HTML page per run, `<prefix>/runs/<run>.html`, from storage alone.

Built from the run file (plan, graph, outcome, timeline of lease waits, starts and ends) plus each
step's record (timings, attempts), its logs and, for train and eval steps, metrics.jsonl and
results.json. Inline SVG and CSS only, no script and no server: it opens from a bucket download.
Each run that executes something writes it; `python -m executor report` rebuilds it.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from executor.core.errors import ExecutorError, StatusError
from executor.core.plan import Action, Plan
from executor.core.record import EXECUTOR_DIR
from executor.engine import outputs
from executor.tools.draw import COLORS, render_svg

OUTCOME_COLORS = {"succeeded": "#7cc47f", "succeeded elsewhere": "#a5d6a7", "failed": "#e57373",
                  "blocked": "#bdbdbd", "running": "#f5c542", "pending": "#f5c542", "watching": "#5bc0de"}
CURVE_W, CURVE_H, PAD = 520, 200, 36


@dataclass
class StepView:
    name: str
    step_id: str
    output_path: str
    decision: str
    reason: str
    outcome: str
    record: dict[str, Any] | None = None
    events: dict[str, Any] = field(default_factory=dict)
    logs: list[str] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] | None = None
    has_status: bool = False


def _read_record(fs: Any, path: str) -> dict[str, Any] | None:
    try:
        return outputs.read_record(fs, path)
    except StatusError:
        return None  # the page shows the step without its record


def _read_json(fs: Any, path: str) -> Any:
    try:
        return json.loads(fs.cat_file(path))
    except (FileNotFoundError, ValueError):
        return None


def _read_metrics(fs: Any, path: str) -> list[dict[str, Any]]:
    try:
        text = fs.cat_file(path).decode()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def run_file_path(fs: Any, prefix: str, run: str | None) -> str:
    """The run file for `run` (a run file name, with or without .json, or a run id); the latest if None."""
    runs = outputs.join(prefix, "runs")
    try:
        names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(runs, detail=False) if p.endswith(".json"))
    except FileNotFoundError:
        names = []
    if not names:
        raise ExecutorError(f"no run files under {runs}: run an experiment with --prefix {prefix} first")
    if run is None:  # names end in <UTC timestamp>-<hex>.json: the latest sorts last within an experiment
        return outputs.join(runs, max(names, key=lambda n: n.rsplit("-", 2)[-2:]))
    wanted = run.rsplit("/", 1)[-1].removesuffix(".json").removesuffix(".html")
    matches = [n for n in names if n.removesuffix(".json") == wanted or n.removesuffix(".json").endswith(f"-{wanted}")]
    if len(matches) != 1:
        raise ExecutorError(f"run {run!r}: {'no' if not matches else len(matches)} run file(s) match under {runs}; "
                            f"known: {', '.join(n.removesuffix('.json') for n in names[-5:])}")
    return outputs.join(runs, matches[0])


def collect(fs: Any, run_file: dict[str, Any]) -> list[StepView]:
    outcome = run_file.get("outcome") or {}
    timeline = run_file.get("timeline") or {}
    views = []
    for entry in run_file.get("steps", []):
        out = entry["output_path"]
        view = StepView(entry["name"], entry["step_id"], out, entry.get("decision") or "?", entry.get("reason") or "",
                        outcome.get(entry["step_id"]) or entry.get("status") or "not run",
                        record=_read_record(fs, f"{out}/{EXECUTOR_DIR}/record.json"),
                        events=timeline.get(entry["step_id"], {}))
        try:
            view.logs = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{out}/{EXECUTOR_DIR}/logs", detail=False))
        except FileNotFoundError:
            pass
        view.has_status = fs.exists(f"{out}/{EXECUTOR_DIR}/status.json")
        view.metrics = _read_metrics(fs, f"{out}/metrics.jsonl")
        view.results = _read_json(fs, f"{out}/results.json")
        views.append(view)
    return views


def graph_plan(run_file: dict[str, Any], views: list[Any]) -> Plan:
    """A Plan-shaped view of the run's DAG (step ids as keys) for draw.render_svg; `views` need
    name, step_id, decision, reason and outcome (the live view passes each step's stored state)."""
    graph = run_file.get("graph") or {}
    decisions = {}
    for v in views:
        node = SimpleNamespace(name=v.name, step_id=v.step_id, deps=tuple(graph.get(v.step_id, ())), weak_deps=())
        action = Action(v.decision) if v.decision in {a.value for a in Action} else Action.RUN
        decisions[v.step_id] = SimpleNamespace(node=node, action=action, reason=v.reason, outcome=v.outcome)
    return Plan(decisions)  # type: ignore[arg-type]


def _link(prefix: str, path: str, label: str) -> str:
    """A link relative to runs/ for paths under the prefix, so a downloaded prefix keeps working."""
    href = f"../{path[len(prefix.rstrip('/')) + 1:]}" if path.startswith(prefix.rstrip("/") + "/") else path
    return f'<a href="{html.escape(href)}">{html.escape(label)}</a>'


def _when(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(t)) if t else "–"


def _timeline_svg(views: list[StepView], start: float, end: float) -> str:
    rows = [v for v in views if v.events.get("starts") or v.events.get("lease_wait_from")]
    span, width, row_h, label_w = max(end - start, 1e-6), 640, 22, 220
    x = lambda t: label_w + (t - start) / span * (width - label_w - 10)  # noqa: E731
    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{len(rows) * row_h + 24}" font-family="sans-serif" font-size="11">']
    for i, v in enumerate(rows):
        y, e = 4 + i * row_h, v.events
        parts.append(f'<text x="4" y="{y + 13}">{html.escape(v.name[:32])}</text>')
        if e.get("lease_wait_from"):
            a, b = x(e["lease_wait_from"]), x(e.get("lease_wait_to") or end)
            parts.append(f'<rect class="lease-wait" data-step-id="{html.escape(v.step_id)}" x="{a:.1f}" y="{y + 3}" '
                         f'width="{max(b - a, 1):.1f}" height="12" fill="#5bc0de"><title>waited on a lease '
                         f'{(e.get("lease_wait_to") or end) - e["lease_wait_from"]:.1f} s</title></rect>')
        if e.get("starts"):
            a, b = x(e["starts"][0]["at"]), x(e.get("ended_at") or end)
            color = OUTCOME_COLORS.get(v.outcome, "#f5c542")
            parts.append(f'<rect class="run-bar" data-step-id="{html.escape(v.step_id)}" data-outcome="{v.outcome}" '
                         f'x="{a:.1f}" y="{y + 3}" width="{max(b - a, 1):.1f}" height="12" fill="{color}">'
                         f'<title>{html.escape(v.name)}: {(e.get("ended_at") or end) - e["starts"][0]["at"]:.1f} s, '
                         f'{len(e["starts"])} start(s)</title></rect>')
    parts.append(f'<text x="{label_w}" y="{len(rows) * row_h + 18}">0 s</text><text x="{width - 60}" '
                 f'y="{len(rows) * row_h + 18}">{span:.1f} s</text></svg>')
    return "".join(parts)


def curve_svg(kind: str, step_id: str, points: list[tuple[float, float]], y_label: str) -> str:
    """A polyline of (x, y) points with its axis ranges; data-* attributes carry the raw values."""
    if not points:
        return ""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = lambda v: PAD + (v - x0) / ((x1 - x0) or 1) * (CURVE_W - 2 * PAD)  # noqa: E731
    sy = lambda v: CURVE_H - PAD - (v - y0) / ((y1 - y0) or 1) * (CURVE_H - 2 * PAD)  # noqa: E731
    path = " ".join(f"{sx(a):.1f},{sy(b):.1f}" for a, b in points)
    return (f'<svg class="curve" data-kind="{kind}" data-step-id="{html.escape(step_id)}" '
            f'data-points="{html.escape(json.dumps(points))}" xmlns="http://www.w3.org/2000/svg" width="{CURVE_W}" '
            f'height="{CURVE_H}" font-family="sans-serif" font-size="11">'
            f'<rect x="{PAD}" y="{PAD}" width="{CURVE_W - 2 * PAD}" height="{CURVE_H - 2 * PAD}" fill="#fafafa" '
            f'stroke="#ccc"/><polyline points="{path}" fill="none" stroke="#1f77b4" stroke-width="1.6"/>'
            f'<text x="{PAD}" y="{PAD - 8}">{html.escape(y_label)} {y1:.4g} … {y0:.4g}</text>'
            f'<text x="{PAD}" y="{CURVE_H - 10}">step {x0:g}</text>'
            f'<text x="{CURVE_W - PAD - 50}" y="{CURVE_H - 10}">step {x1:g}</text></svg>')


def step_curves(name: str, step_id: str, metrics: list[dict[str, Any]], results: Any) -> list[str]:
    """A train step's loss curve (metrics.jsonl) and an eval step's bits per byte (results.json),
    each a heading plus its SVG (the live view draws the same)."""
    curves = []
    loss = [(r["step"], r["loss"]) for r in metrics if "step" in r and isinstance(r.get("loss"), (int, float))]
    if loss:
        curves.append(f"<h3>{html.escape(name)}: training loss</h3>" + curve_svg("loss", step_id, loss, "loss"))
    bpb = ((results if isinstance(results, dict) else {}).get("model") or {}).get("bits_per_byte")
    if isinstance(bpb, (int, float)):
        point = [(results.get("train_step") or 0, bpb)]
        curves.append(f"<h3>{html.escape(name)}: bits per byte {bpb:.4f}</h3>"
                      + curve_svg("bpb", step_id, point, "bits/byte"))
    return curves


def render_report(run_file: dict[str, Any], views: list[StepView]) -> str:
    prefix = run_file.get("prefix", "")
    title = f"{run_file.get('experiment', 'run')} — run {run_file.get('run_id', '?')}"
    start = run_file.get("started_at") or time.time()
    end = run_file.get("finished_at") or max([start] + [v.events.get("ended_at") or 0 for v in views])
    paint = lambda d: (d.outcome, OUTCOME_COLORS.get(d.outcome, COLORS.get(d.action, "#eee")))  # noqa: E731
    dag = render_svg(graph_plan(run_file, views), paint=paint)
    rows = []
    for v in views:
        e, record = v.events, v.record or {}
        starts = e.get("starts") or []
        began = starts[0]["at"] if starts else (record.get("timings") or {}).get("started_at")
        ended = e.get("ended_at") or (record.get("timings") or {}).get("finished_at")
        attempts = ", ".join(f"#{s['attempt']}{' (takeover)' if s.get('takeover') else ''}" for s in starts) or \
            (f"#{record['attempt']}" if record.get("attempt") else "–")
        wait = (f"{(e.get('lease_wait_to') or end) - e['lease_wait_from']:.1f} s" if e.get("lease_wait_from") else "–")
        links = [_link(prefix, f"{v.output_path}/{EXECUTOR_DIR}/status.json", "status")] if v.has_status else []
        if v.record is not None:
            links.append(_link(prefix, f"{v.output_path}/{EXECUTOR_DIR}/record.json", "record"))
        links += [_link(prefix, f"{v.output_path}/{EXECUTOR_DIR}/logs/{name}", name) for name in v.logs]
        rows.append(f'<tr class="step" data-step-id="{html.escape(v.step_id)}" data-outcome="{html.escape(v.outcome)}">'
                    f'<td>{html.escape(v.name)}<br><code>{html.escape(v.step_id)}</code></td>'
                    f'<td style="background:{OUTCOME_COLORS.get(v.outcome, "#eee")}">{html.escape(v.outcome)}</td>'
                    f'<td>{html.escape(v.decision)}: {html.escape(v.reason)}</td><td>{_when(began)}</td>'
                    f'<td>{_when(ended)}</td><td>{attempts}</td><td>{wait}</td><td>{" · ".join(links) or "–"}</td></tr>')
    curves = [curve for v in views for curve in step_curves(v.name, v.step_id, v.metrics, v.results)]
    legend = " ".join(f'<span style="background:{c};padding:2px 8px;border-radius:4px">{html.escape(k)}</span>'
                      for k, c in OUTCOME_COLORS.items())
    exit_code = run_file.get("exit_code")
    return ("<!doctype html>\n<html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;margin:20px}}"
            "td,th{padding:3px 10px;text-align:left;vertical-align:top;border-bottom:1px solid #eee}"
            "code{font-size:11px}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p id='summary'>prefix <code>{html.escape(prefix)}</code> · started "
            f"{_when(start)} UTC · {end - start:.1f} s · exit code {exit_code if exit_code is not None else '?'}</p>"
            f"<h2>Graph</h2><p>{legend}</p>{dag}"
            f"<h2>Timeline</h2>{_timeline_svg(views, start, end)}"
            "<h2>Steps</h2><table id='steps'><tr><th>step</th><th>outcome</th><th>plan</th><th>start</th>"
            f"<th>end</th><th>attempts</th><th>lease wait</th><th>files</th></tr>{''.join(rows)}</table>"
            f"<h2>Curves</h2>{''.join(curves) or '<p>no train or eval steps in this run</p>'}"
            "</body></html>\n")


def write_report(prefix: str, run_path: str, storage_options: dict | None = None, fs: Any = None) -> str:
    """Build the report of the run file at `run_path` and write it beside it; returns its path."""
    fs = fs or outputs.filesystem(prefix, storage_options)
    run_file = outputs.read_run_file(fs, run_path)  # StatusError (exit 2) if unreadable or newer
    if run_file is None:
        raise ExecutorError(f"{run_path}: no such run file")
    page = render_report(run_file, collect(fs, run_file))
    target = run_path.removesuffix(".json") + ".html"
    with fs.open(target, "wb") as f:
        f.write(page.encode())
    return target
