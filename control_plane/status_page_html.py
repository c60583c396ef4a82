"""The status page's document: static HTML, one inline style and one inline script.

A Python string rather than a package-data file, so that it ships wherever the module
does. It holds no data: the script fetches ``status``, ``status/routes`` and ``breakers`` (relative, so
the page also works behind a path prefix) and builds every element with
``createElement``/``textContent``; no value is ever parsed as HTML. ``status_page.py``
serves it with a Content-Security-Policy naming the hashes of ``STYLE`` and ``SCRIPT``.

``?refresh=<seconds>`` in the page's URL changes the poll interval (default 2 s).
"""

from __future__ import annotations

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1rem 2rem; color: #1b1f24; background: #fbfbfc; }
h1 { font-size: 1.3rem; margin: 0 0 .3rem; }
h2 { font-size: 1.05rem; margin: 1.4rem 0 .4rem; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border: 1px solid #d5d9de; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
td.mono, span.mono { font-family: ui-monospace, monospace; font-size: 12px; }
.msg { white-space: pre-wrap; overflow-wrap: anywhere; color: #57606a; font-size: 12px; }
.badge { display: inline-block; min-width: 3.5em; padding: 0 .35em; border-radius: 3px; font-size: 12px; text-align: center; }
.true, .ok { background: #dafbe1; color: #116329; }
.false, .bad { background: #ffebe9; color: #a40e26; }
.unknown, .warn { background: #fff8c5; color: #7d4e00; }
tr.nack td { background: #fff5f5; }
#banner { padding: .4rem .6rem; margin: .4rem 0; border-radius: 4px; }
#banner:empty { display: none; }
.meta { color: #57606a; }
"""

SCRIPT = """
"use strict";
(() => {
  const params = new URLSearchParams(window.location.search);
  const seconds = Number(params.get("refresh") || "2");
  const REFRESH_MS = Math.min(60, Math.max(0.5, Number.isFinite(seconds) ? seconds : 2)) * 1000;
  const ENVOY_TYPES = ["CDS", "EDS", "LDS", "RDS", "SDS"];
  const byId = (id) => document.getElementById(id);
  let updates = 0;

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }
  function cell(content, className) {
    const td = el("td", null, className);
    for (const part of [].concat(content)) {
      if (part instanceof Node) td.appendChild(part);
      else if (part !== undefined && part !== null) td.appendChild(document.createTextNode(String(part)));
    }
    return td;
  }
  function tr(cells, className) {
    const row = el("tr", null, className);
    for (const c of cells) row.appendChild(c instanceof HTMLTableCellElement ? c : cell(c));
    return row;
  }
  function fill(id, rows, empty, columns) {
    const body = byId(id);
    if (rows.length === 0) {
      const td = cell(empty, "meta");
      td.colSpan = columns;
      rows = [tr([td])];
    }
    body.replaceChildren(...rows);
  }
  function short(version) { return version ? String(version).slice(0, 12) : "-"; }
  function when(epoch) {
    if (!epoch) return "never";
    const age = Math.max(0, Math.round(Date.now() / 1000 - epoch));
    const text = age < 120 ? age + " s ago" : age < 7200 ? Math.round(age / 60) + " min ago" : Math.round(age / 3600) + " h ago";
    const span = el("span", text);
    span.title = new Date(epoch * 1000).toISOString();
    return span;
  }
  function badge(text, className) { return el("span", text, "badge " + className); }
  function condition(c) {
    const parts = [badge(c.status, c.status.toLowerCase()), " ", el("span", c.reason)];
    if (c.status !== "True") parts.push(el("div", c.message, "msg"));
    return cell(parts);
  }
  function isEnvoy(proxy) {
    const kinds = proxy.subscribed.length ? proxy.subscribed : Object.keys(proxy.acked);
    return kinds.some((kind) => ENVOY_TYPES.includes(kind));
  }
  function latestFor(status, group) {
    const groups = status.groups || {};
    return groups[group] || groups["*"] || {};
  }
  function behind(proxy, status) {
    const latest = latestFor(status, proxy.cluster);
    const wanted = proxy.subscribed.length ? proxy.subscribed : Object.keys(latest);
    return Object.keys(latest).filter((kind) => wanted.includes(kind) && proxy.acked[kind] !== latest[kind]);
  }
  function state(proxy, status) {
    const late = behind(proxy, status);
    const nacked = Object.keys(proxy.nacked);
    if (nacked.length) return badge("NACKED " + nacked.join(","), "bad");
    if (late.length) return badge("BEHIND " + late.join(","), "warn");
    return badge("in sync", "ok");
  }
  function nackRows(proxy, columns) {
    return Object.entries(proxy.nacked).map(([kind, nack]) => {
      const parts = [el("strong", kind + " NACK"), " of version ", el("span", short(nack.version), "mono"), " ", when(nack.at),
                     el("div", nack.error, "msg nack-error")];
      if (nack.routes.length) {
        const list = el("ul", null, "nack-routes");
        for (const r of nack.routes) {
          const item = el("li", "caused by ");
          item.appendChild(el("strong", r.route));
          item.appendChild(document.createTextNode(" (" + r.origin + ")"));
          list.appendChild(item);
        }
        parts.push(list);
      }
      const td = cell(parts);
      td.colSpan = columns;
      const row = tr([td], "nack");
      row.dataset.node = proxy.node;
      row.dataset.type = kind;
      return row;
    });
  }

  function renderHeader(status, routes) {
    const ready = byId("ready");
    ready.replaceChildren(badge(status.ready ? "ready" : "NOT READY", status.ready ? "ok" : "bad"), " ", el("span", status.reason));
    const snap = status.snapshot;
    byId("snapshot").textContent = snap ? "snapshot " + short(snap.version) + ", " + snap.routes + " routes" : "no snapshot yet";
    byId("route-count").textContent = routes.total + " routes, " + routes.problems + " with a problem" +
      (routes.routes.length < routes.total ? " (showing " + routes.routes.length + ", problems first)" : "");
  }

  function renderSources(status) {
    const rows = (status.sources || []).map((s) => {
      const details = [];
      const problems = [];
      if (s.kind === "git") {
        details.push("repo " + s.repo + " branch " + s.branch + (s.path ? " path " + s.path : ""));
        if (s.latest && s.latest !== s.serving) details.push("latest commit " + short(s.latest));
        if (s.rejected) {
          problems.push(el("div", "commit " + short(s.rejected.commit) + " rejected:", "msg"));
          for (const p of s.rejected.problems) problems.push(el("div", p, "msg"));
        }
      } else if (s.kind === "static-endpoints") {
        details.push(s.file + ", " + s.services + " services");
        for (const p of s.error || []) problems.push(el("div", p, "msg"));
      } else if (s.kind === "kubernetes") {
        details.push((s.leader ? "leader" : "follower") + ", " + s.status_writes + " status writes");
        for (const [key, message] of Object.entries(s.rejected || {})) problems.push(el("div", key + ": " + message, "msg"));
        for (const [key, message] of Object.entries(s.conflicts || {})) problems.push(el("div", key + ": " + message, "msg"));
        for (const [key, message] of Object.entries(s.unresolved || {})) problems.push(el("div", key + ": " + message, "msg"));
        const grants = s.reference_grants;
        if (grants && grants.installed) details.push(grants.grants + " ReferenceGrants");
        if (grants && !grants.installed) problems.push(el("div", "ReferenceGrant CRD not installed: no cross-namespace backend is served", "msg"));
      }
      if (s.error && typeof s.error === "string") problems.push(el("div", s.error, "msg"));
      const row = tr([
        cell(s.name), cell(s.kind), cell(s.kind === "git" ? short(s.serving) : "-", "mono"),
        cell(s.routes === undefined ? "-" : s.routes), cell(s.kind === "git" ? when(s.last_sync) : "-"),
        cell(details.join("; ")), cell(problems.length ? problems : badge("ok", "ok")),
      ]);
      row.dataset.source = s.name;
      return row;
    });
    fill("sources-body", rows, "no sources", 7);
  }

  function renderRoutes(routes) {
    const rows = routes.routes.map((r) => {
      const row = tr([cell(r.route, "mono"), cell(r.origin, "mono"), condition(r.accepted), condition(r.programmed),
                      condition(r.resolvedRefs), condition(r.enforced)]);
      row.dataset.route = r.route;
      return row;
    });
    fill("routes-body", rows, "no routes", 6);
  }

  function renderProxies(status) {
    const proxies = status.proxies || [];
    const envoys = proxies.filter(isEnvoy);
    const services = proxies.filter((p) => !isEnvoy(p));
    const kinds = ["CDS", "EDS", "LDS", "RDS"].concat(envoys.some((p) => p.subscribed.includes("SDS")) ? ["SDS"] : []);
    const head = byId("envoys-head");
    head.replaceChildren(...["node", "cluster", "protocol", "connected"].concat(kinds, ["state"]).map((t) => el("th", t)));
    const envoyRows = [];
    for (const p of envoys) {
      const latest = latestFor(status, p.cluster);
      const versions = kinds.map((kind) => {
        const td = cell(short(p.acked[kind]), "mono");
        td.title = "latest " + (latest[kind] || "-");
        if (latest[kind] && p.acked[kind] !== latest[kind]) td.className += " warn";
        return td;
      });
      const row = tr([cell(p.node), cell(p.cluster), cell(p.protocol), cell(when(p.connected_at))].concat(versions, [cell(state(p, status))]));
      row.dataset.node = p.node;
      envoyRows.push(row, ...nackRows(p, 5 + kinds.length));
    }
    fill("envoys-body", envoyRows, "no Envoy connected", 5 + kinds.length);
    const serviceRows = [];
    for (const p of services) {
      const acked = Object.entries(p.acked).map(([kind, v]) => kind + " " + short(v)).join(", ") || "-";
      const row = tr([cell(p.node), cell(p.cluster), cell(p.protocol), cell(p.subscribed.join(", ") || "-"),
                      cell(acked, "mono"), cell(when(p.connected_at)), cell(state(p, status))]);
      row.dataset.node = p.node;
      serviceRows.push(row, ...nackRows(p, 7));
    }
    fill("services-body", serviceRows, "no ratelimit_svc or ext_authz connected", 7);
  }

  function renderNackHistory(status) {
    const rows = (status.nacks || []).slice(-20).reverse().map((n) => tr([
      cell(when(n.at)), cell(n.node), cell(n.type), cell(short(n.version), "mono"), cell(n.error, "msg"),
      cell(n.routes.map((r) => r.route + " (" + r.origin + ")").join("\\n"), "msg"),
    ]));
    fill("nacks-body", rows, "no NACK since the control plane started", 6);
  }

  const PHASE_CLASS = { "closed": "ok", "open": "bad", "half-open": "warn" };
  function renderBreakers(breakers) {
    if (breakers === null) {
      fill("breakers-body", [], "this control plane does not report breakers", 7);
      return;
    }
    const rows = breakers.breakers.map((b) => {
      const phase = [badge(b.phase.toUpperCase().replace("-", "_"), PHASE_CLASS[b.phase] || "warn")];
      if (b.pinned) phase.push(" ", el("strong", "pinned"));
      else if (b.phase === "open" && b.open_until) phase.push(el("div", "probes " + new Date(b.open_until * 1000).toLocaleTimeString(), "msg"));
      const w = b.window || {};
      const row = tr([cell(b.route, "mono"), cell(phase), cell(b.since ? when(b.since) : "-"), cell(b.actor),
                      cell(w.counting + ": " + w.calls + " calls, " + w.failures + " failed, " + w.slow + " slow"),
                      cell(b.generation), cell(b.reason, "msg")]);
      row.dataset.route = b.route;
      row.dataset.phase = b.phase;
      return row;
    });
    fill("breakers-body", rows, "no route has a breaker (circuitBreaker.errorRate)", 7);
  }

  async function getJson(path) {
    const response = await fetch(path, { cache: "no-store", headers: { accept: "application/json" } });
    if (!response.ok) throw new Error(path + ": HTTP " + response.status);
    return response.json();
  }

  async function refresh() {
    try {
      const [status, routes, breakers] = await Promise.all([
        getJson("status"), getJson("status/routes"), getJson("breakers").catch(() => null),
      ]);
      renderHeader(status, routes);
      renderSources(status);
      renderRoutes(routes);
      renderBreakers(breakers);
      renderProxies(status);
      renderNackHistory(status);
      byId("banner").replaceChildren();
      byId("banner").className = "";
      updates += 1;
      document.body.dataset.updates = String(updates);
      byId("updated").textContent = "updated " + new Date().toLocaleTimeString() + ", every " + REFRESH_MS / 1000 + " s";
    } catch (error) {
      byId("banner").className = "bad";
      byId("banner").textContent = "cannot read the control plane's status (showing the last one read): " + error.message;
    } finally {
      window.setTimeout(refresh, REFRESH_MS);
    }
  }
  refresh();
})();
"""

_BODY = """
<h1>Gatehouse control plane</h1>
<div><span id="ready">loading…</span> · <span id="snapshot" class="meta"></span> · <span id="updated" class="meta"></span></div>
<div id="banner" role="alert"></div>

<h2>Sources</h2>
<table id="sources"><thead><tr><th>name</th><th>kind</th><th>serving commit</th><th>routes</th><th>last sync</th><th>details</th><th>problems</th></tr></thead>
<tbody id="sources-body"></tbody></table>

<h2>Routes <span id="route-count" class="meta"></span></h2>
<table id="routes"><thead><tr><th>route</th><th>origin</th><th>Accepted</th><th>Programmed</th><th>ResolvedRefs</th><th>Enforced</th></tr></thead>
<tbody id="routes-body"></tbody></table>

<h2>Route breakers</h2>
<table id="breakers"><thead><tr><th>route</th><th>phase</th><th>since</th><th>by</th><th>counting</th><th>generation</th><th>reason</th></tr></thead>
<tbody id="breakers-body"></tbody></table>

<h2>Envoys</h2>
<table id="envoys"><thead><tr id="envoys-head"></tr></thead><tbody id="envoys-body"></tbody></table>

<h2>Services fed over xDS (ratelimit_svc, ext_authz)</h2>
<table id="services"><thead><tr><th>node</th><th>cluster</th><th>protocol</th><th>subscribed</th><th>ACKed</th><th>connected</th><th>state</th></tr></thead>
<tbody id="services-body"></tbody></table>

<details id="history"><summary>Recent NACKs (the last 20, newest first)</summary>
<table id="nacks"><thead><tr><th>when</th><th>node</th><th>type</th><th>version</th><th>Envoy's message</th><th>routes</th></tr></thead>
<tbody id="nacks-body"></tbody></table>
</details>
"""


def document() -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>Gatehouse status</title>"
        f"<style>{STYLE}</style></head><body>{_BODY}<script>{SCRIPT}</script></body></html>\n"
    )
