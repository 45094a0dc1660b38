// xlb status page: polls status.json every second and draws it. Everything
// is built with DOM calls (no markup from data), and the charts are SVG
// drawn here; nothing is loaded from elsewhere.
"use strict";

const POLL_MS = 500;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : String(k));
  }
  return e;
}

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// num formats a count or rate with SI prefixes (1.2k, 3.4M).
function num(v, digits) {
  v = Number(v || 0);
  const a = Math.abs(v);
  for (const [div, unit] of [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]]) {
    if (a >= div) return (v / div).toFixed(1) + unit;
  }
  return a >= 100 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(digits === undefined ? 1 : digits);
}

function bits(bytesPerSec) { return num(Number(bytesPerSec || 0) * 8) + "b/s"; }

function proto(p) { return String(p || "").replace("PROTOCOL_", "").toLowerCase(); }

function vipOf(s) {
  const a = s.vip.includes(":") ? "[" + s.vip + "]" : s.vip;
  return a + ":" + (s.port ? s.port : "*") + "/" + proto(s.protocol);
}

// The forwarding method and scheduler of a service: what the messages
// carry, else the defaults of a config without those keys.
function method(s) { return s.method || s.forward || s.encap || "gre"; }
function scheduler(s) { return s.scheduler || "maglev"; }

function health(b) {
  const h = b.health || {};
  if (!h.check) return ["unchecked", "muted", ""];
  if (!h.known) return ["unknown", "warn", "no probe completed yet"];
  if (h.healthy) return ["up", "ok", ""];
  return ["down", "bad", h.last_error || ""];
}

function state(b) {
  const o = b.override || null;
  let st = String(b.state || "").replace("BACKEND_STATE_", "").toLowerCase() || "active";
  if (o && o.drain !== undefined && o.drain !== null) st = o.drain ? "drain" : "active";
  return [st, o ? " (override)" : ""];
}

function weight(b) {
  const o = b.override || null;
  if (o && o.weight !== undefined && o.weight !== null) return b.weight + " → " + o.weight + " (override)";
  return String(b.weight);
}

// connections is a backend's tracked connections: what the message carries,
// else the page's last count of the connection table ("≥" when the count
// is a lower bound).
function connections(s, b, conns) {
  if (b.tracked_flows !== undefined && b.tracked_flows !== null) return num(b.tracked_flows);
  if (!conns) return "–";
  const n = (conns.backends || {})[s.name + " " + b.address] || 0;
  return (conns.truncated ? "≥" : "") + num(n);
}

function backendRow(s, b, conns) {
  const [h, hcls, why] = health(b);
  const [st, ov] = state(b);
  const r = b.rates || {}, c = b.counters || {};
  const inDP = b.in_data_plane;
  const tr = el("tr", {"data-service": s.name, "data-backend": b.address,
    class: h === "down" || !inDP ? "down" : (st === "drain" ? "drain" : "")},
    el("td", {}, b.address),
    el("td", {}, b.pool || ""),
    el("td", {class: "num"}, weight(b)),
    el("td", {class: "state"}, st + ov),
    el("td", {class: "health " + hcls, title: why}, h),
    el("td", {class: "dp " + (inDP ? "ok" : "bad")}, inDP ? "yes" : "no"),
    el("td", {class: "num"}, b.table_entries || 0),
    el("td", {class: "num conns"}, connections(s, b, conns)),
    el("td", {class: "num"}, num(r.new_flows)),
    el("td", {class: "num"}, num(r.packets)),
    el("td", {class: "num"}, bits(r.bytes)),
    el("td", {class: "num"}, num(c.packets)),
    el("td", {class: "muted why", title: why}, why));
  return tr;
}

const backendHeads = ["backend", "pool", "weight", "state", "health", "in tables", "table slots",
  "connections", "new/s", "pkt/s", "rate", "packets", ""];

function chart(series, span) {
  const W = 320, H = 96, L = 40, B = 22, T = 6;
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, width: "100%", role: "img",
    "aria-label": "packets per second over the last " + Math.round(span / 60) + " minutes"});
  const ts = series ? series.t : [], ys = series ? series.packets : [];
  const now = ts.length ? ts[ts.length - 1] : Date.now();
  const max = Math.max(1, ...ys);
  const x = t => L + (W - L - 2) * (1 - (now - t) / (span * 1000));
  const y = v => T + (H - T - B) * (1 - v / max);
  for (const f of [0, 0.5, 1]) {
    svg.append(svgEl("line", {class: "grid", x1: L, x2: W - 2, y1: y(max * f), y2: y(max * f)}));
    const lbl = svgEl("text", {x: L - 4, y: y(max * f) + 3, "text-anchor": "end"});
    lbl.textContent = num(max * f);
    svg.append(lbl);
  }
  for (const [t, s] of [[now - span * 1000, "-" + Math.round(span / 60) + " min"], [now, "now"]]) {
    const lbl = svgEl("text", {x: x(t), y: H - 3, "text-anchor": t === now ? "end" : "start"});
    lbl.textContent = s;
    svg.append(lbl);
  }
  if (ts.length > 1) {
    const pts = ts.map((t, i) => `${x(t).toFixed(1)},${y(ys[i]).toFixed(1)}`);
    svg.append(svgEl("polygon", {class: "area",
      points: `${x(ts[0]).toFixed(1)},${y(0)} ${pts.join(" ")} ${x(now).toFixed(1)},${y(0)}`}));
    svg.append(svgEl("polyline", {class: "line", points: pts.join(" ")}));
  }
  return el("div", {class: "chart"}, el("div", {class: "muted"}, "packets/s"), svg);
}

function service(s, hist, conns) {
  const r = s.rates || {};
  const series = (hist.series || []).find(x => x.service === s.name);
  const rows = (s.backends || []).map(b => backendRow(s, b, conns));
  const head = el("tr", {}, ...backendHeads.map((h, i) => el("th", {class: i >= 6 && i < 12 ? "num" : ""}, h)));
  return el("div", {class: "service", "data-service": s.name},
    el("div", {class: "backends"},
      el("h3", {}, s.name + " ", el("span", {class: "muted"}, vipOf(s))),
      el("div", {class: "meta"},
        "method ", el("b", {class: "method"}, method(s)),
        " · scheduler ", el("b", {class: "scheduler"}, scheduler(s)),
        " · pool ", el("b", {}, s.active_pool || "none usable"),
        " · ", el("b", {}, num(r.packets)), " pkt/s",
        " · ", el("b", {}, bits(r.bytes)),
        " · ", el("b", {}, num(r.new_flows)), " new flows/s"),
      el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows))),
    chart(series, hist.seconds || 300));
}

function ago(ts) {
  if (!ts) return "";
  const s = Math.round((Date.now() - Date.parse(ts)) / 1000);
  return s < 90 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

function summary(st) {
  const sc = st.self_check || {}, cfg = st.config || {};
  const parts = [
    el("span", {}, "interface ", el("b", {}, st.interface || "?"), " (", st.xdp_mode || "?", ")"),
    el("span", {}, "self-check ", sc.ok ? el("b", {class: "ok", id: "selfcheck"}, "ok")
      : el("b", {class: "bad", id: "selfcheck", title: sc.last_error || ""}, "failing")),
    el("span", {}, "node ", st.drained ? el("b", {class: "warn", id: "drain"}, "drained")
      : el("b", {class: "ok", id: "drain"}, "in service")),
    el("span", {}, "config #", cfg.generation || 0, " ", el("span", {class: "muted"}, ago(cfg.committed_at))),
    el("span", {}, "xlbd ", st.version || "?"),
  ];
  if (st.prober && st.prober.enabled) {
    parts.push(el("span", {}, "prober ", el("b", {class: st.prober.ok ? "ok" : "bad"}, st.prober.ok ? "ok" : "failing")));
  }
  return parts;
}

function table(heads, rows, empty) {
  if (!rows.length) return el("div", {class: "muted"}, empty);
  return el("table", {}, el("thead", {}, el("tr", {}, ...heads.map(h => el("th", {}, h)))),
    el("tbody", {}, ...rows));
}

function bgp(st) {
  const ext = st.external_routes;
  if (ext && ext.where) {
    const n = (ext.prefixes || []).length;
    return el("div", {id: "bgp-external"}, ext.error ? el("span", {class: "bad"}, "routes in " + ext.where + " unreadable: " + ext.error)
      : (n ? `bgp.mode external: ${n} VIP route${n > 1 ? "s" : ""} in ${ext.where} for the host's routing daemon: ${ext.prefixes.join(" ")}`
        : `bgp.mode external: no VIP route in ${ext.where} (the routing daemon announces nothing)`));
  }
  return table(["peer", "AS", "state", "up for", "advertised", "received"],
    (st.bgp_sessions || []).map(s => el("tr", {"data-peer": s.peer},
      el("td", {}, s.peer), el("td", {}, s.asn),
      el("td", {class: String(s.state).toLowerCase() === "established" ? "ok" : "bad"}, s.state),
      el("td", {}, s.uptime || ""), el("td", {}, s.advertised), el("td", {}, s.received))),
    "no BGP speaker in this xlbd");
}

// syncPeers shows whatever the status carries about the peers of the
// connection sync (absent until xlbd has one).
function syncPeers(st) {
  const peers = st.sync_peers || (st.sync && st.sync.peers) || [];
  if (!peers.length) return el("div", {class: "muted"}, "no sync peers");
  const keys = Object.keys(peers[0]);
  return table(keys, peers.map(p => el("tr", {}, ...keys.map(k =>
    el("td", {}, typeof p[k] === "object" ? JSON.stringify(p[k]) : p[k])))), "");
}

function conntrack(st, conns) {
  const ct = st.conntrack || {};
  const cap = Number(ct.capacity || 0);
  let used = ct.in_use, note = "";
  if ((used === undefined || used === null) && conns) {
    used = conns.in_use;
    note = " · counted " + ago(conns.at) + ", expired entries included";
  }
  if (used === undefined || used === null) {
    return el("div", {}, "capacity " + num(cap) + " entries; not counted yet");
  }
  used = Number(used);
  const pct = cap ? 100 * used / cap : 0;
  const fill = el("div", {});
  fill.style.width = Math.min(100, pct).toFixed(1) + "%";
  return el("div", {id: "ct"}, el("div", {}, `${num(used)} of ${num(cap)} entries (${pct.toFixed(1)} %)`,
    el("span", {class: "muted"}, note)), el("div", {class: "bar"}, fill));
}

// A drop is a packet the forwarder did not deliver: drop_* counters, and
// the ones over a limit or failed.
function isDrop(name) {
  return /^drop_/.test(name) || (/(_limited|_fail)$/.test(name) && !/^trace_/.test(name));
}

function drops(ctrs) {
  const rows = (ctrs.global || []).filter(c => isDrop(c.name)).map(c =>
    el("tr", {"data-drop": c.name, class: Number(c.value) > 0 ? "drain" : ""},
      el("td", {}, c.name.replace(/^drop_/, "")), el("td", {class: "num"}, num(c.value)),
      el("td", {class: "num"}, num(c.rate) + "/s")));
  return table(["reason", "packets", "rate"], rows, "no counters");
}

function render(snap) {
  const st = snap.status || {}, svcs = (snap.services || {}).services || [], ctrs = snap.counters || {};
  document.getElementById("node").textContent = st.node || "";
  document.title = "xlb " + (st.node || "") + " status";
  document.getElementById("summary").replaceChildren(...summary(st));
  document.getElementById("services").replaceChildren(
    ...(svcs.length ? svcs.map(s => service(s, snap.history || {}, snap.connections)) : [el("div", {class: "muted"}, "no services")]));
  document.getElementById("bgp").replaceChildren(bgp(st));
  document.getElementById("sync").replaceChildren(syncPeers(st));
  document.getElementById("conntrack").replaceChildren(conntrack(st, snap.connections));
  document.getElementById("drops").replaceChildren(drops(ctrs));
}

function connState(text, bad) {
  const c = document.getElementById("conn");
  c.textContent = text;
  c.className = "conn" + (bad ? " bad" : "");
}

async function poll() {
  try {
    const resp = await fetch("status.json", {cache: "no-store"});
    if (!resp.ok) throw new Error("HTTP " + resp.status);
    const snap = await resp.json();
    if (snap.status) render(snap);
    if (snap.error) connState("xlbd: " + snap.error, true);
    else connState("updated " + new Date(snap.sampled_at).toLocaleTimeString(), false);
  } catch (e) {
    connState("no answer from xlbd (" + e.message + "); retrying", true);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

poll();
