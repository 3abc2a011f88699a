// kafkatw console: plain JavaScript, no build step, nothing loaded from elsewhere.
// Routes (the hash): #/ cluster, #/topics, #/topics/NAME, #/groups, #/groups/ID,
// #/messages/TOPIC?partition=P&offset=O (or &timestamp=MS). Text is always set with
// textContent, never parsed as HTML. Views refresh every POLL_MS while the tab is visible.
"use strict";

const POLL_MS = 3000;
let session = null;
let pollTimer = null;
let renderSeq = 0;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "style") el.style.cssText = v;  // CSSOM: allowed by the page's CSP, an attribute is not
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function fmtNum(n) { return n === null || n === undefined ? "" : Number(n).toLocaleString("en-US"); }

async function api(path, options) {
  const resp = await fetch("/api/" + path, Object.assign({credentials: "same-origin"}, options || {}));
  let doc = {};
  try { doc = await resp.json(); } catch (e) { doc = {error: resp.statusText}; }
  if (!resp.ok) throw new Error(doc.error || resp.statusText);
  return doc;
}

async function act(action, params) {
  return api("actions/" + action, {
    method: "POST",
    headers: {"Content-Type": "application/json", "X-CSRF-Token": session.csrfToken},
    body: JSON.stringify(Object.assign({confirm: true}, params)),
  });
}

function toast(text, isError) {
  const t = document.getElementById("toast");
  t.textContent = text;
  t.className = isError ? "error" : "";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

// -- the action dialog: a form, then a confirmation naming exactly what will happen ---------

function modalOpen() { return !document.getElementById("modal-backdrop").hidden; }

function closeModal() { document.getElementById("modal-backdrop").hidden = true; }

function dialog(title, fields, describe, run) {
  const backdrop = document.getElementById("modal-backdrop");
  const body = document.getElementById("modal-body");
  const error = document.getElementById("modal-error");
  const ok = document.getElementById("modal-ok");
  document.getElementById("modal-title").textContent = title;
  body.replaceChildren();
  error.hidden = true;
  const inputs = {};
  for (const f of fields) {
    let input;
    if (f.options) {
      input = h("select", {name: f.name, id: "f-" + f.name},
        f.options.map(o => h("option", {value: o, selected: o === f.value}, o)));
    } else if (f.multiline) {
      input = h("textarea", {name: f.name, id: "f-" + f.name, rows: 3, placeholder: f.placeholder || ""});
      input.value = f.value || "";
    } else {
      input = h("input", {name: f.name, id: "f-" + f.name, type: f.type || "text", placeholder: f.placeholder || ""});
      input.value = f.value === undefined || f.value === null ? "" : f.value;
    }
    inputs[f.name] = input;
    body.append(h("label", {for: "f-" + f.name}, f.label), input);
  }
  let confirming = null;
  ok.textContent = fields.length ? "Continue" : "Confirm";
  const form = document.getElementById("modal");
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    const values = {};
    for (const [k, input] of Object.entries(inputs)) values[k] = input.value.trim();
    if (confirming === null) {
      let text;
      try { text = describe(values); } catch (e) { error.textContent = e.message; error.hidden = false; return; }
      confirming = values;
      body.replaceChildren(h("p", {class: "confirm-text", id: "confirm-text"}, text));
      ok.textContent = "Confirm";
      ok.id = "modal-ok";
      return;
    }
    ok.disabled = true;
    try {
      const result = await run(confirming);
      closeModal();
      toast(result.done || "done");
      render();
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
    } finally {
      ok.disabled = false;
    }
  };
  document.getElementById("modal-cancel").onclick = closeModal;
  backdrop.hidden = false;
  if (!fields.length) form.onsubmit(new Event("submit"));
  const first = body.querySelector("input, select, textarea");
  if (first) first.focus();
}

// -- small charts (inline SVG) --------------------------------------------------------------

function sparkline(points, width, height, cls) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("class", cls || "spark");
  if (!points || points.length < 2) return svg;
  const ys = points.map(p => p[1]);
  const max = Math.max(1, ...ys);
  const t0 = points[0][0], t1 = points[points.length - 1][0] || t0 + 1;
  const pad = cls === "chart" ? 24 : 1;
  const xy = points.map(p => [pad + (width - 2 * pad) * (p[0] - t0) / Math.max(1e-9, t1 - t0),
                              height - pad - (height - 2 * pad) * p[1] / max]);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", xy.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2456c7");
  line.setAttribute("stroke-width", cls === "chart" ? 2 : 1.5);
  svg.append(line);
  if (cls === "chart") {
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", 4);
    label.setAttribute("y", 14);
    label.setAttribute("font-size", 11);
    label.textContent = "max " + fmtNum(max);
    svg.append(label);
  }
  return svg;
}

// -- views ----------------------------------------------------------------------------------

function table(headers, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, headers.map(c => h("th", {class: c.endsWith("#") ? "num" : ""}, c.replace(/#$/, ""))))),
    h("tbody", {}, rows));
}

function card(label, value, id) {
  return h("div", {class: "card"}, h("div", {class: "label"}, label), h("div", {class: "value", id: id}, value));
}

async function viewOverview() {
  const o = await api("overview");
  const dirs = o.logDirs.map(d => h("tr", {},
    h("td", {}, d.path, d.offline ? h("span", {class: "badge bad"}, " offline") : null),
    h("td", {class: "num"}, fmtNum(d.partitions)), h("td", {class: "num"}, fmtBytes(d.sizeBytes)),
    h("td", {}, d.totalBytes < 0 ? h("span", {class: "muted"}, "unknown") : [
      h("span", {class: "bar"}, h("span", {style: "width:" +
        (d.totalBytes > 0 ? (100 * (d.totalBytes - d.usableBytes) / d.totalBytes).toFixed(1) : 0) + "%"})),
      " ", fmtBytes(d.totalBytes - d.usableBytes), " of ", fmtBytes(d.totalBytes), " used"])));
  return [
    h("h1", {}, "Cluster ", h("span", {class: "muted"}, o.clusterId || "")),
    h("div", {class: "cards"},
      card("Brokers", o.brokers.length), card("Controller", o.controllerId), card("Topics", fmtNum(o.topics), "topic-count"),
      card("Partitions", fmtNum(o.partitions)), card("Under-replicated", fmtNum(o.underReplicated)),
      card("Offline", fmtNum(o.offline)), card("Version", o.version)),
    o.error ? h("p", {class: "error"}, o.error) : null,
    h("h2", {}, "Brokers"),
    table(["Id", "Host", "Port", "Rack"], o.brokers.map(b => h("tr", {},
      h("td", {}, b.id, b.id === o.controllerId ? h("span", {class: "badge ok"}, " controller") : null),
      h("td", {}, b.host), h("td", {}, b.port), h("td", {}, b.rack || "—")))),
    h("h2", {}, "Listeners"),
    table(["Name", "Security protocol", "Host", "Port"], o.listeners.map(l => h("tr", {},
      h("td", {}, l.name), h("td", {}, l.securityProtocol), h("td", {}, l.host), h("td", {}, l.port)))),
    h("h2", {}, "Log dirs"),
    o.logDirsError ? h("p", {class: "error"}, o.logDirsError) :
      table(["Path", "Partitions#", "Size#", "Disk"], dirs),
  ];
}

let topicSearch = "";

async function viewTopics() {
  const doc = await api("topics?search=" + encodeURIComponent(topicSearch));
  const search = h("input", {id: "topic-search", type: "search", placeholder: "Search topics", value: topicSearch});
  search.addEventListener("input", () => { topicSearch = search.value; clearTimeout(viewTopics.t);
    viewTopics.t = setTimeout(render, 250); });
  const rows = doc.topics.map(t => h("tr", {"data-topic": t.name},
    h("td", {}, h("a", {href: "#/topics/" + encodeURIComponent(t.name)}, t.name),
      t.internal ? h("span", {class: "badge"}, " internal") : null),
    h("td", {class: "num"}, t.partitions), h("td", {class: "num"}, t.replicationFactor),
    h("td", {}, t.underReplicated ? h("span", {class: "badge warn"}, t.underReplicated + " under-replicated") :
      t.offline ? null : h("span", {class: "badge ok"}, "in sync"),
      t.offline ? h("span", {class: "badge bad"}, t.offline + " offline") : null),
    h("td", {class: "num", "data-records": t.records}, fmtNum(t.records)),
    h("td", {class: "num"}, fmtBytes(t.sizeBytes)),
    h("td", {}, sparkline(t.rate, 120, 22), " ",
      h("span", {class: "muted"}, t.rate.length ? t.rate[t.rate.length - 1][1].toFixed(1) + "/s" : ""))));
  return [
    h("h1", {}, "Topics ", h("span", {class: "muted"}, "(" + doc.topics.length + ")")),
    h("div", {class: "toolbar"}, search,
      h("button", {id: "create-topic", class: "primary", onclick: createTopicDialog}, "Create topic")),
    table(["Topic", "Partitions#", "Replication#", "Replicas", "Records#", "Size#", "Messages in"], rows,
          {id: "topics-table"}),
  ];
}

function parseConfigs(text) {
  const out = {};
  for (const line of text.split(/[\n,]/)) {
    if (!line.trim()) continue;
    const i = line.indexOf("=");
    if (i < 1) throw new Error("configs are name=value lines: " + line);
    out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
  }
  return out;
}

function createTopicDialog() {
  dialog("Create topic", [
    {name: "topic", label: "Name"}, {name: "partitions", label: "Partitions", type: "number", value: "1"},
    {name: "replicationFactor", label: "Replication factor", type: "number", value: "1"},
    {name: "configs", label: "Configs (name=value per line)", multiline: true, placeholder: "retention.ms=86400000"},
  ], v => {
    if (!v.topic) throw new Error("a name is required");
    parseConfigs(v.configs);
    return `Create topic ${v.topic} with ${v.partitions} partition(s), replication factor ${v.replicationFactor}?`;
  }, v => act("create-topic", {topic: v.topic, partitions: v.partitions, replicationFactor: v.replicationFactor,
                               configs: parseConfigs(v.configs)}));
}

async function viewTopic(name) {
  const t = await api("topics/" + encodeURIComponent(name));
  if (t.error) return [h("h1", {}, name), h("p", {class: "error"}, t.error)];
  const parts = t.partitions.map(p => h("tr", {"data-partition": p.partition},
    h("td", {class: "num"}, p.partition), h("td", {class: "num"}, p.leader),
    h("td", {}, p.replicas.join(", ")),
    h("td", {}, p.isr.join(", "), p.isr.length < p.replicas.length ? h("span", {class: "badge warn"}, " under-replicated") : null),
    h("td", {class: "num", "data-start": p.startOffset}, fmtNum(p.startOffset)),
    h("td", {class: "num", "data-end": p.endOffset}, fmtNum(p.endOffset)),
    h("td", {class: "num"}, p.segments), h("td", {class: "num"}, fmtBytes(p.sizeBytes)),
    h("td", {}, h("a", {href: `#/messages/${encodeURIComponent(name)}?partition=${p.partition}`}, "messages"), " ",
      h("button", {class: "small danger", onclick: () => deleteRecordsDialog(name, p)}, "delete records"))));
  const configs = (t.configs || []).map(c => h("tr", {"data-config": c.name},
    h("td", {}, c.name), h("td", {}, c.sensitive ? "(hidden)" : (c.value === null ? "null" : c.value)),
    h("td", {}, c.isDefault ? h("span", {class: "badge"}, "default") : h("span", {class: "badge ok"}, c.source)),
    h("td", {}, c.readOnly ? null : h("button", {class: "small", onclick: () => alterConfigDialog(name, c)}, "edit"),
      c.isDefault || c.readOnly ? null :
        h("button", {class: "small", onclick: () => dialog("Reset config", [],
          () => `Remove the override ${c.name}=${c.value} of ${name} (its default applies again)?`,
          () => act("alter-config", {topic: name, name: c.name, value: null}))}, "reset"))));
  return [
    h("h1", {}, "Topic ", h("span", {id: "topic-name"}, name),
      t.internal ? h("span", {class: "badge"}, " internal") : null),
    h("div", {class: "cards"}, card("Partitions", t.partitions.length), card("Records", fmtNum(t.records), "topic-records"),
      card("Topic id", h("span", {style: "font-size:12px"}, t.topicId || ""))),
    h("div", {class: "toolbar"},
      h("a", {href: "#/messages/" + encodeURIComponent(name)}, h("button", {}, "Browse messages")),
      h("button", {id: "add-partitions", onclick: () => dialog("Add partitions",
        [{name: "partitions", label: "New total number of partitions", type: "number", value: t.partitions.length + 1}],
        v => `Increase ${name} from ${t.partitions.length} to ${v.partitions} partitions? This cannot be undone.`,
        v => act("add-partitions", {topic: name, partitions: v.partitions}))}, "Add partitions"),
      h("button", {id: "delete-topic", class: "danger", onclick: () => dialog("Delete topic", [],
        () => `Delete topic ${name} and all its ${fmtNum(t.records)} records?`,
        () => act("delete-topic", {topic: name}).then(r => { location.hash = "#/topics"; return r; }))}, "Delete topic")),
    h("h2", {}, "Partitions"),
    table(["Partition#", "Leader#", "Replicas", "ISR", "Start offset#", "End offset#", "Segments#", "Size#", ""], parts,
          {id: "partitions-table"}),
    h("h2", {}, "Configs"),
    t.configsError ? h("p", {class: "error"}, t.configsError) :
      table(["Name", "Value", "Source", ""], configs, {id: "configs-table"}),
  ];
}

function deleteRecordsDialog(name, p) {
  dialog(`Delete records of ${name}-${p.partition}`,
    [{name: "offset", label: `Delete every record before offset (${p.startOffset}…${p.endOffset})`, type: "number",
      value: p.endOffset}],
    v => `Delete the records of ${name}-${p.partition} before offset ${v.offset}? They cannot be read again.`,
    v => act("delete-records", {topic: name, partition: p.partition, offset: v.offset}));
}

function alterConfigDialog(name, c) {
  dialog("Alter config", [{name: "value", label: c.name, value: c.value}],
    v => `Set ${c.name} of ${name} to ${v.value}?`,
    v => act("alter-config", {topic: name, name: c.name, value: v.value}));
}

async function viewGroups() {
  const doc = await api("groups");
  const rows = doc.groups.map(g => h("tr", {"data-group": g.groupId},
    h("td", {}, h("a", {href: "#/groups/" + encodeURIComponent(g.groupId)}, g.groupId)),
    h("td", {}, h("span", {class: "badge " + (g.state === "Stable" ? "ok" : "")}, g.state)),
    h("td", {class: "num"}, g.members), h("td", {}, g.topics.join(", ")),
    h("td", {class: "num", "data-lag": g.lag}, fmtNum(g.lag)), h("td", {class: "error"}, g.error || "")));
  return [h("h1", {}, "Consumer groups ", h("span", {class: "muted"}, "(" + doc.groups.length + ")")),
          table(["Group", "State", "Members#", "Topics", "Lag#", ""], rows, {id: "groups-table"})];
}

async function viewGroup(id) {
  const g = await api("groups/" + encodeURIComponent(id));
  if (g.error) return [h("h1", {}, id), h("p", {class: "error"}, g.error)];
  const topics = [...new Set(g.partitions.map(p => p.topic))];
  const members = g.members.map(m => h("tr", {},
    h("td", {}, m.memberId), h("td", {}, m.clientId), h("td", {}, m.host),
    h("td", {}, m.assignment.map(a => a.topic + ": " + a.partitions.join(",")).join("; "))));
  const parts = g.partitions.map(p => h("tr", {"data-tp": p.topic + "-" + p.partition},
    h("td", {}, p.topic), h("td", {class: "num"}, p.partition), h("td", {class: "num", "data-committed": p.committed},
      fmtNum(p.committed)), h("td", {class: "num"}, fmtNum(p.end)),
    h("td", {class: "num", "data-lag": p.lag}, fmtNum(p.lag)), h("td", {}, p.member || "—")));
  return [
    h("h1", {}, "Group ", h("span", {id: "group-id"}, id)),
    h("div", {class: "cards"}, card("State", g.state, "group-state"), card("Members", g.members.length),
      card("Total lag", fmtNum(g.lag), "group-lag"), card("Protocol", g.protocol || "—")),
    h("div", {class: "toolbar"},
      h("button", {id: "reset-offsets", onclick: () => dialog("Reset offsets of " + id, [
        {name: "topic", label: "Topic", options: topics.length ? topics : [""], value: topics[0]},
        {name: "to", label: "To", options: ["earliest", "latest", "offset", "timestamp"], value: "earliest"},
        {name: "value", label: "Offset, or timestamp (ms since the epoch)", placeholder: "only for offset/timestamp"},
      ], v => `Reset the offsets of ${id} on every partition of ${v.topic} to ${v.to}` +
              (v.to === "offset" || v.to === "timestamp" ? " " + v.value : "") + "?",
      v => act("reset-offsets", {group: id, topic: v.topic, to: v.to,
                                 offset: v.to === "offset" ? v.value : undefined,
                                 timestamp: v.to === "timestamp" ? v.value : undefined}))}, "Reset offsets"),
      h("button", {id: "delete-group", class: "danger", onclick: () => dialog("Delete group", [],
        () => `Delete group ${id} and its committed offsets?`,
        () => act("delete-group", {group: id}).then(r => { location.hash = "#/groups"; return r; }))}, "Delete group")),
    g.offsetsError ? h("p", {class: "error"}, g.offsetsError) : null,
    h("h2", {}, "Lag over time"), sparkline(g.lagHistory, 700, 140, "chart"),
    h("h2", {}, "Partitions"),
    table(["Topic", "Partition#", "Committed#", "End#", "Lag#", "Member"], parts, {id: "group-partitions"}),
    h("h2", {}, "Members"),
    table(["Member", "Client id", "Host", "Assignment"], members),
  ];
}

function renderBytes(label, v) {
  return h("div", {}, h("span", {class: "fmt"}, label + " · " + v.format), h("pre", {class: "v-" + v.format},
    v.text === null ? "null" : v.text));
}

async function viewMessages(topic, query) {
  const params = new URLSearchParams(query);
  const doc = await api(`messages/${encodeURIComponent(topic)}?` + params.toString());
  const form = h("form", {class: "toolbar", id: "browse-form"},
    h("label", {}, "Partition "), h("input", {name: "partition", type: "number", value: params.get("partition") || "0", style: "width:80px"}),
    h("label", {}, "Offset "), h("input", {name: "offset", type: "number", value: params.get("offset") || "", style: "width:110px"}),
    h("label", {}, "or time "), h("input", {name: "time", type: "datetime-local", step: "1"}),
    h("label", {}, "Max records "), h("input", {name: "limit", type: "number", value: params.get("limit") || "50", style: "width:80px"}),
    h("button", {type: "submit", class: "primary"}, "Show"));
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const f = new FormData(form), q = new URLSearchParams();
    q.set("partition", f.get("partition") || "0");
    if (f.get("time")) q.set("timestamp", String(new Date(f.get("time")).getTime()));
    else if (f.get("offset")) q.set("offset", f.get("offset"));
    q.set("limit", f.get("limit") || "50");
    location.hash = `#/messages/${encodeURIComponent(topic)}?` + q.toString();
  });
  const records = doc.records.map(r => r.error ? h("p", {class: "error"}, r.error) : h("div", {class: "record", "data-offset": r.offset},
    h("div", {class: "meta"}, `offset ${r.offset} · ${new Date(r.timestamp).toISOString()} · ${r.value.size} bytes`),
    renderBytes("key", r.key), renderBytes("value", r.value),
    r.headers.length ? h("div", {}, r.headers.map(x => renderBytes("header " + x.key, x.value))) : null));
  return [
    h("h1", {}, "Messages of ", h("a", {href: "#/topics/" + encodeURIComponent(topic)}, topic)),
    form,
    h("p", {class: "muted", id: "browse-summary"}, `partition ${doc.partition}: offsets ${doc.startOffset}…${doc.endOffset}, ` +
      `showing ${doc.records.length} from ${doc.from === undefined ? "-" : doc.from} (at most ${fmtBytes(doc.maxBytes)} read)`),
    doc.error ? h("p", {class: "error"}, doc.error) : null,
    h("div", {id: "records"}, records),
  ];
}

// -- routing and live refresh ---------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts.length === 0) return ["overview", viewOverview, true];
  if (parts[0] === "topics" && parts.length === 1) return ["topics", viewTopics, true];
  if (parts[0] === "topics") return ["topics", () => viewTopic(parts[1]), true];
  if (parts[0] === "groups" && parts.length === 1) return ["groups", viewGroups, true];
  if (parts[0] === "groups") return ["groups", () => viewGroup(parts[1]), true];
  if (parts[0] === "messages") return ["topics", () => viewMessages(parts[1], query || ""), false];
  return ["overview", viewOverview, true];
}

async function render(isPoll) {
  const seq = ++renderSeq;
  const [nav, view, live] = route();
  clearTimeout(pollTimer);
  if (isPoll && modalOpen()) {
    schedule(live);
    return;
  }
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === nav);
  let content;
  try {
    content = await view();
  } catch (e) {
    content = [h("p", {class: "error", id: "view-error"}, e.message)];
  }
  if (seq !== renderSeq) return;  // a newer render started meanwhile
  const main = document.getElementById("view");
  const focused = document.activeElement && document.activeElement.id;
  const caret = focused && document.activeElement.selectionStart;
  main.replaceChildren(...content.flat().filter(c => c !== null && c !== undefined && c !== false));
  main.dataset.rendered = String(seq);
  if (focused) {
    const el = document.getElementById(focused);
    if (el) { el.focus(); if (caret !== null && el.setSelectionRange) el.setSelectionRange(caret, caret); }
  }
  schedule(live);
}

function schedule(live) {
  clearTimeout(pollTimer);
  document.getElementById("live").classList.toggle("paused", !live);
  if (live) pollTimer = setTimeout(() => {
    if (document.visibilityState === "visible") render(true); else schedule(live);
  }, POLL_MS);
}

async function start() {
  try {
    session = await api("session");
  } catch (e) {
    document.getElementById("view").replaceChildren(h("p", {class: "error"}, e.message));
    return;
  }
  document.getElementById("principal").textContent = session.principal;
  window.addEventListener("hashchange", () => render());
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") render(true); });
  render();
}

document.addEventListener("DOMContentLoaded", start);
