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
from executor.core.record import EXECUTOR_DIR, Absent
from executor.engine.prefix.prefixes import OpenedPrefix
from executor.engine.prefix.prefix_view import PrefixView, RunRow
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
    cut_off: str | None = None  # committed by this run as an early cutoff: why


def _read_json(view: PrefixView, key: str | None) -> Any:
    versioned = view.store.read(key) if key else None
    try:
        return json.loads(versioned.data) if versioned else None
    except ValueError:
        return None


def _read_metrics(view: PrefixView, key: str | None) -> list[dict[str, Any]]:
    versioned = view.store.read(key) if key else None
    text = versioned.data.decode() if versioned else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def find_run(view: PrefixView, run: str | None) -> RunRow:
    """The run `run` names (a run file name, with or without .json, or a run id); the latest if None."""
    runs = view.path_of("runs")
    rows = view.runs()
    if not rows:
        raise ExecutorError(f"no run files under {runs}: run an experiment with --prefix {view.prefix} first")
    try:
        found = view.run(run)
    except ValueError as e:
        raise ExecutorError(f"{e} under {runs}") from None
    if found is None:
        raise ExecutorError(f"run {run!r}: no run file matches under {runs}; "
                            f"known: {', '.join(r.name for r in rows[:5])}")
    return found


def collect(view: PrefixView, run_file: dict[str, Any]) -> list[StepView]:
    """Each step of the run as stored now: its status's presence, record, logs, metrics and results,
    read through the read model (one read_many for the statuses, one for the records)."""
    outcome = run_file.get("outcome") or {}
    timeline = run_file.get("timeline") or {}
    entries = run_file.get("steps", [])
    rels = [_rel(run_file, entry["output_path"]) for entry in entries]
    present = [r for r in rels if r is not None]
    rows = dict(zip(present, view.steps(present)))
    records = view.records(present)
    views = []
    for entry, rel in zip(entries, rels):
        row = rows.get(rel)
        view_ = StepView(entry["name"], entry["step_id"], entry["output_path"], entry.get("decision") or "?",
                         entry.get("reason") or "", outcome.get(entry["step_id"]) or entry.get("status") or "not run",
                         record=records.get(rel), events=timeline.get(entry["step_id"], {}),
                         cut_off=entry.get("cut_off"))
        if rel is not None:
            view_.logs = [log.key.rsplit("/", 1)[-1] for log in view.logs(rel)]
            view_.has_status = row is not None and row.state is not Absent.NO_STATUS
            view_.metrics = _read_metrics(view, f"{rel}/metrics.jsonl")
            view_.results = _read_json(view, f"{rel}/results.json")
        views.append(view_)
    return views


def _rel(run_file: dict[str, Any], output_path: str) -> str | None:
    """A step's output dir relative to the run's prefix (None if it lies elsewhere)."""
    prefix = str(run_file.get("prefix") or "").rstrip("/")
    return output_path[len(prefix) + 1:] if prefix and output_path.startswith(prefix + "/") else None


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


def mirrors_table(run_file: dict[str, Any]) -> str:
    """The mirrored inputs the run needed (the run file's `mirrors`): how each came to be complete here."""
    from executor.engine.transfers.mirror import human_bytes

    rows = []
    for m in run_file.get("mirrors") or []:
        copied = m.get("how") == "copied"
        size = f"{human_bytes(m.get('bytes') or 0)}, {m.get('files')} files" if copied else "–"
        took = f"{m.get('seconds') or 0:.1f} s" if copied else "–"
        rows.append(f'<tr class="mirror"><td><code>{html.escape(str(m.get("logical")))}</code></td>'
                    f'<td>{html.escape(str(m.get("how")))}</td>'
                    f'<td>{html.escape(str(m.get("source") or m.get("error") or "–"))}</td><td>{size}</td>'
                    f'<td>{took}</td><td><code>{html.escape(str(m.get("path")))}</code></td></tr>')
    if not rows:
        return ""
    return ("<h2>Mirrored inputs</h2><table id='mirrors'><tr><th>input</th><th>how</th><th>source</th>"
            f"<th>size</th><th>time</th><th>copy</th></tr>{''.join(rows)}</table>")


def shard_counts(result: Any) -> str | None:
    """"2 processed, 14 reused" for a step whose result reports its shards (shards_processed and
    shards_reused: incremental data steps, steps/shard_reuse.py); None for any other step."""
    if not isinstance(result, dict) or "shards_processed" not in result or "shards_reused" not in result:
        return None
    return f"{result['shards_processed']} processed, {result['shards_reused']} reused"


def _shards_note(v: StepView) -> str:
    counts = shard_counts((v.record or {}).get("result"))
    return f'<br><small class="shards">shards: {html.escape(counts)}</small>' if counts else ""


def _cut_off_note(v: StepView) -> str:
    """Under a cut-off step's outcome: why it was not run (executor.engine.run.cutoff)."""
    return f'<br><small class="cut-off">{html.escape(v.cut_off)}</small>' if v.cut_off else ""


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
                    f'<td style="background:{OUTCOME_COLORS.get(v.outcome, "#eee")}">{html.escape(v.outcome)}'
                    f'{_cut_off_note(v)}{_shards_note(v)}</td>'
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
            f"{mirrors_table(run_file)}"
            f"<h2>Curves</h2>{''.join(curves) or '<p>no train or eval steps in this run</p>'}"
            "</body></html>\n")


def write_report(opened: OpenedPrefix, run_path: str) -> str:
    """Build the report of the run file at `run_path` under the opened prefix and write it beside it;
    returns its path. Reads through the prefix's read model."""
    prefix, view = opened.url, opened.view
    key = run_path[len(prefix.rstrip("/")) + 1:] if run_path.startswith(prefix.rstrip("/") + "/") else run_path
    found = view.runs(keys=[key])
    if not found:
        raise ExecutorError(f"{run_path}: no such run file")
    if found[0].problem:
        raise StatusError(found[0].problem)  # unreadable or newer: exit 2
    run_file = dict(found[0].document or {})
    page = render_report(run_file, collect(view, run_file))
    target = run_path.removesuffix(".json") + ".html"
    with opened.filesystem.open(target, "wb") as f:
        f.write(page.encode())
    return target
