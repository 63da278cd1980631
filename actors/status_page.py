"""The status page a member serves at ``/``: plain HTML and a little JavaScript that fetches
``/membership/status`` every second and redraws. No external assets (works offline).

Element ids (tests and scrapers rely on them): ``#me`` (``data-durable``: "true" when this
member journals its queues, shown as "queues journaled"), ``#members`` (one ``tr`` per member,
``data-member=<name>``, ``data-state=<state>``, ``data-recovery=<recovery status>``,
``data-role=<data or arbitrator>``), ``#views``, ``#suspected``, ``#suspicions``, ``#traffic``,
``#dropped``, ``#updated`` (the time of the last successful refresh), ``#error``.
"""

STATUS_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>raygroups status</title>
<style>
 body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
 h1 { font-size: 1.3em; margin: 0 0 .3em; } h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
 table { border-collapse: collapse; } td, th { padding: .15em .7em; text-align: left;
 border-bottom: 1px solid #ddd; } th { background: #f3f3f3; }
 .alive, .member { color: #070; } .suspect, .paused { color: #a60; }
 .dead, .left, .shutdown { color: #b00; } .mono { font-family: ui-monospace, monospace; }
 #error { color: #b00; } .grid { display: flex; gap: 2.5em; flex-wrap: wrap; }
</style>
</head>
<body>
<h1>raygroups <span id="cluster"></span></h1>
<div id="me">loading&hellip;</div>
<div id="error"></div>
<h2>Members</h2>
<table id="members"><thead><tr><th>#</th><th>name</th><th>uuid</th><th>address</th>
<th>role</th><th>state</th><th>recovery</th></tr></thead><tbody></tbody></table>
<div class="grid">
<div><h2>Suspected now</h2>
<table id="suspected"><thead><tr><th>member</th><th>state</th><th>incarnation</th></tr></thead>
<tbody></tbody></table>
<h2>Suspicions and verdicts</h2>
<table id="suspicions"><thead><tr><th>time</th><th>event</th><th>member</th><th>reason</th></tr>
</thead><tbody></tbody></table></div>
<div><h2>Traffic</h2>
<table id="traffic"><tbody></tbody></table>
<h2>Dropped</h2>
<table id="dropped"><tbody></tbody></table></div>
</div>
<h2>View history</h2>
<table id="views"><thead><tr><th>view</th><th>installed</th><th>members</th><th>joined</th>
<th>left</th></tr></thead><tbody></tbody></table>
<p>updated <span id="updated">never</span></p>
<script>
"use strict";
function esc(x) {
  return String(x === null || x === undefined ? "" : x).replace(/[&<>"']/g,
    c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function vid(v) { return v ? esc(v[0]) + ":" + esc(v[1]) : "-"; }
function time(t) { return t ? new Date(t * 1000).toLocaleTimeString() : ""; }
function fill(id, rows) {
  document.querySelector("#" + id + " tbody").innerHTML = rows.join("");
}
function render(s) {
  const me = s.member;
  document.getElementById("cluster").textContent = me.cluster;
  document.getElementById("me").innerHTML =
    "member <b>" + esc(me.name) + "</b> <span class=mono>" + esc(me.uuid_text) + "</span> at " +
    esc(me.address) + " &middot; state <span class='" + esc(me.state) + "'>" + esc(me.state) +
    "</span> &middot; view <b id=viewid>" + vid(me.view_id) + "</b> (" + esc(me.view_size) +
    " members)" + (me.coordinator ? " &middot; coordinator" : "") +
    (me.durable ? " &middot; queues journaled" : "");
  document.getElementById("me").dataset.durable = me.durable ? "true" : "false";
  fill("members", s.members.map((m, i) =>
    "<tr data-member='" + esc(m.name) + "' data-role='" + esc(m.role) +
    "' data-state='" + esc(m.state) +
    "' data-recovery='" + esc(m.recovery) + "'><td>" + i +
    "</td><td>" + esc(m.name) + (m.self ? " (this)" : "") + "</td><td class=mono>" +
    esc(m.uuid_text) + "</td><td class=mono>" + esc(m.address) + "</td><td>" +
    esc([m.coordinator ? "coordinator" : "", m.role === "arbitrator" ? "arbitrator" : ""]
      .filter(Boolean).join(", ")) + "</td><td class='" + esc(m.state) + "'>" +
    esc(m.state) + "</td><td>" + esc(m.recovery) + "</td></tr>"));
  const none = ["<tr class=none><td>none</td></tr>"];
  fill("suspected", s.suspected.length ? s.suspected.map(x => "<tr><td>" + esc(x.member) +
    "</td><td class='" + esc(x.state) + "'>" + esc(x.state) + "</td><td>" +
    esc(x.incarnation) + "</td></tr>") : none);
  fill("suspicions", s.suspicions.length ? s.suspicions.map(x => "<tr><td>" + time(x.t) +
    "</td><td>" + esc(x.event) + "</td><td>" + esc(x.member) + "</td><td>" + esc(x.reason) +
    "</td></tr>") : none);
  const f = s.figures;
  fill("traffic", Object.keys(f).map(k => "<tr><td>" + esc(k.replace(/_/g, " ")) +
    "</td><td>" + esc(f[k]) + "</td></tr>"));
  const d = s.dropped;
  const dk = Object.keys(d);
  fill("dropped", dk.length ? dk.map(k => "<tr><td>" + esc(k) + "</td><td>" + esc(d[k]) +
    "</td></tr>") : none);
  fill("views", s.views.map(v => "<tr data-view='" + vid(v.view_id) + "'><td>" +
    vid(v.view_id) + "</td><td>" + time(v.installed_at) + "</td><td>" +
    esc(v.members.join(", ")) + "</td><td>" + esc((v.joined || []).join(", ")) + "</td><td>" +
    esc((v.left || []).join(", ")) + "</td></tr>"));
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}
async function refresh() {
  try {
    const r = await fetch("membership/status", {cache: "no-store"});
    if (!r.ok) throw new Error("HTTP " + r.status);
    render(await r.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the member: " + e.message;
  }
  setTimeout(refresh, 1000);
}
refresh();
</script>
</body>
</html>
"""
