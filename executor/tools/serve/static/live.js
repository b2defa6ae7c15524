// stepgraph serve: live updates over server-sent events, heartbeat ages, clickable DAG nodes.
// Every fragment comes from the server's autoescaping templates; nothing from a step is turned
// into markup here (log lines are appended as text nodes).
"use strict";
(function () {
  const body = document.body;
  const view = body.dataset.view;

  function ago(at) {
    const s = Math.max(0, Date.now() / 1000 - at);
    if (s < 120) return Math.round(s) + " s ago";
    if (s < 7200) return Math.round(s / 60) + " min ago";
    return (s / 3600).toFixed(1) + " h ago";
  }
  function tickAges() {
    document.querySelectorAll(".age[data-at]").forEach(function (el) {
      const at = parseFloat(el.dataset.at);
      if (at) el.textContent = ago(at);
    });
  }
  setInterval(tickAges, 1000);

  // A DAG node opens its step (the run page lists each step's link with its step id).
  document.addEventListener("click", function (ev) {
    const node = ev.target.closest ? ev.target.closest("g.node") : null;
    if (!node) return;
    const link = Array.from(document.querySelectorAll("a[data-step-id]"))
      .find(function (a) { return a.dataset.stepId === node.dataset.stepId; });
    if (link) window.location.assign(link.href);
  });

  if (!view) return;
  const params = new URLSearchParams({ view: view, since: body.dataset.since || "0" });
  if (view === "overview") {
    params.set("state", body.dataset.stateFilter || "");
    params.set("q", body.dataset.q || "");
  } else if (view === "step") {
    params.set("step", body.dataset.step);
    const live = document.querySelector("section.log[data-live]");
    params.set("offset", live ? live.dataset.offset : "0");
  } else if (view === "run") {
    params.set("run", body.dataset.run);
  }

  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }
  function on(name, handler) {
    source.addEventListener(name, function (ev) { handler(JSON.parse(ev.data)); });
  }

  const source = new EventSource("/events?" + params.toString());
  const dot = document.getElementById("live");
  source.onopen = function () { if (dot) dot.classList.add("on"); };
  source.onerror = function () { if (dot) dot.classList.remove("on"); };

  on("reload", function () { source.close(); window.location.reload(); });

  on("step", function (d) {
    const row = fragment(d.html).firstElementChild;
    const old = document.getElementById("step-" + d.id);
    if (old) { old.replaceWith(row); return; }
    const tbody = document.querySelector("#steps tbody");
    if (!tbody) return;
    let header = Array.from(tbody.querySelectorAll("tr.group")).find(function (g) { return g.dataset.group === d.group; });
    if (!header) {
      header = fragment(d.group_html).firstElementChild;
      tbody.appendChild(header);
    }
    let after = header;
    while (after.nextElementSibling && after.nextElementSibling.classList.contains("step")) after = after.nextElementSibling;
    after.after(row);
    const empty = document.getElementById("empty");
    if (empty) empty.remove();
  });
  on("remove", function (d) {
    const old = document.getElementById("step-" + d.id);
    if (old) old.remove();
  });
  on("counts", function (d) {
    Object.keys(d.states).forEach(function (state) {
      const el = document.querySelector('#counts .count[data-state="' + state + '"] .n');
      if (el) el.textContent = String(d.states[state]);
    });
    const matched = document.getElementById("matched");
    if (matched) matched.textContent = String(d.matched);
  });
  on("run", function (d) {
    const row = fragment(d.html).firstElementChild;
    const old = document.getElementById("run-" + d.id);
    if (old) { old.replaceWith(row); return; }
    const tbody = document.querySelector("#runs tbody");
    if (tbody && row) tbody.prepend(row);
  });
  on("dag", function (d) {
    const dag = document.getElementById("dag");
    if (dag) dag.replaceChildren(fragment(d.html));
  });
  on("detail", function (d) {
    const old = document.getElementById("detail");
    if (old) old.replaceWith(fragment(d.html));
  });
  on("log", function (d) {
    const pre = document.querySelector('section.log[data-attempt="' + d.attempt + '"] pre.log-text');
    if (!pre) return;
    const atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
    pre.appendChild(document.createTextNode(d.text));
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  });
})();
