// The management UI: one page per hash route, every figure from the HTTP API (/api/...),
// with the user's credentials kept in sessionStorage for the tab's life. No build step.
import uPlot from "/ui/vendor/uplot-1.6.32/uPlot.esm.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let charts = [];
let timer = null;
const history = { t: [], publish: [], deliver: [], ack: [], ready: [], unacked: [] };

const enc = encodeURIComponent;
const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) =>
  ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function auth() { return sessionStorage.getItem("auth"); }

async function api(method, path, body) {
  const resp = await fetch(path, {
    method,
    headers: { Authorization: "Basic " + auth(), "Content-Type": "application/json" },
    credentials: "omit",  // no cookies, so a 401's WWW-Authenticate raises no browser prompt
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (resp.status === 401) { logout(); throw new Error("login required"); }
  const text = await resp.text();
  const data = text ? JSON.parse(text) : null;
  if (!resp.ok) throw new Error((data && data.reason) || resp.statusText);
  return data;
}

function table(columns, rows, id) {
  const head = columns.map(([title]) => `<th>${esc(title)}</th>`).join("");
  const body = rows.map((r) => "<tr>" + columns.map(([, f]) => `<td>${f(r)}</td>`).join("")
    + "</tr>").join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function show(html) { main.innerHTML = html; }
function fail(err) {
  const p = document.getElementById("page-error");
  if (p) p.textContent = err.message; else show(`<p class="error" id="page-error">${esc(err.message)}</p>`);
}

function stopCharts() {
  if (timer) clearInterval(timer);
  timer = null;
  charts.forEach((c) => c.destroy());
  charts = [];
}

// The y axis as wide as its longest label: uPlot's fixed 50 px cut "10,000" to "0,000".
// uPlot calls this with the formatted tick labels (its axis-autosize demo measures them too).
const measure = document.createElement("canvas").getContext("2d");
function yAxisSize(u, values, axisIdx, cycleNum) {
  const axis = u.axes[axisIdx];
  if (cycleNum > 1) return axis._size;  // settled: keep the width, as uPlot asks
  measure.font = axis.font[0];  // a canvas of its own: uPlot caches the font it set on its own
  const text = Math.max(0, ...(values || []).map((v) => measure.measureText(String(v)).width))
    / devicePixelRatio;
  return Math.ceil(axis.ticks.size + axis.gap + text + 8);  // 8 px clear of the left edge
}

// The x range: the samples' span; for one sample (just after loading) the minute before it,
// where uPlot would stretch one point over 86 400 000 s (a day at its ms: 1e-3) -- years.
function xRange(u, min, max) {
  const t = u.data[0];
  if (t.length === 0) return [min, max];
  return t.length === 1 ? [t[0] - 60, t[0]] : [t[0], t[t.length - 1]];
}

// -- pages ------------------------------------------------------------------------------
async function overview() {
  const o = await api("GET", "/api/overview");
  const nodes = await api("GET", "/api/nodes").catch(() => []);
  const alarms = nodes.flatMap((n) => [n.mem_alarm && "memory", n.disk_free_alarm && "disk"]).filter(Boolean);
  const t = o.object_totals, q = o.queue_totals;
  show(`<section class="card"><h2>Overview</h2>
    ${alarms.length ? `<p class="alarm" id="alarms">Resource alarm: ${alarms.join(", ")}</p>`
      : `<p id="alarms">No resource alarms.</p>`}
    <div class="totals" id="totals">
      ${["connections", "channels", "exchanges", "queues", "consumers"].map((k) =>
        `<span><b id="total-${k}">${t[k]}</b>${k}</span>`).join("")}
      <span><b id="total-messages">${q.messages}</b>messages</span>
    </div><p>Node ${esc(o.node)} · ${esc(o.product_name)} ${esc(o.product_version)}</p></section>
    ${nodes.some((n) => n.cluster_role) ? `<section class="card"><h3>Cluster members</h3>` +
      table([["Node", (n) => esc(n.name)], ["Role", (n) => esc(n.cluster_role)],
        ["Running", (n) => (n.running ? "yes" : "no")], ["In sync", (n) => (n.insync ? "yes" : "no")],
        ["Lag", (n) => (n.replication_lag ?? "")], ["Last ack (s)", (n) => (n.last_ack_s ?? "")],
        ["Term", (n) => n.term]], nodes, "members-table") + `</section>` : ""}
    <section class="card"><h3>Queued messages</h3><div id="chart-queued"></div></section>
    <section class="card"><h3>Message rates (msg/s)</h3><div id="chart-rates"></div></section>`);
  const opts = (title, series) => ({
    title, width: Math.min(900, main.clientWidth - 40), height: 220,
    axes: [{}, { size: yAxisSize }],
    scales: { x: { time: true, range: xRange } },
    series: [{}, ...series.map((label, i) => ({ label, stroke: ["#1d3557", "#e63946", "#2a9d8f"][i] }))],
  });
  const queued = new uPlot(opts("Queued messages", ["ready", "unacked"]),
    [history.t, history.ready, history.unacked], document.getElementById("chart-queued"));
  const rates = new uPlot(opts("Message rates", ["publish", "deliver/get", "ack"]),
    [history.t, history.publish, history.deliver, history.ack], document.getElementById("chart-rates"));
  charts = [queued, rates];
  const sample = async () => {
    const s = await api("GET", "/api/overview");
    const m = s.message_stats, l = s.queue_totals;
    const totals = { ...s.object_totals, messages: l.messages };  // the figures above the charts
    for (const [k, v] of Object.entries(totals)) {
      const el = document.getElementById(`total-${k}`);
      if (el) el.textContent = v;  // gone when the page changed while the request was out
    }
    history.t.push(Date.now() / 1000);
    history.publish.push(m.publish_details.rate);
    history.deliver.push(m.deliver_get_details.rate);
    history.ack.push(m.ack_details.rate);
    history.ready.push(l.messages_ready);
    history.unacked.push(l.messages_unacknowledged);
    for (const k of Object.keys(history)) if (history[k].length > 120) history[k].shift();
    queued.setData([history.t, history.ready, history.unacked]);
    rates.setData([history.t, history.publish, history.deliver, history.ack]);
  };
  await sample();
  timer = setInterval(() => sample().catch(() => {}), 5000);
}

async function connections() {
  const rows = await api("GET", "/api/connections");
  show(`<h2>Connections</h2>` + table([
    ["Name", (r) => esc(r.name)], ["User", (r) => esc(r.user)], ["Vhost", (r) => esc(r.vhost)],
    ["Client", (r) => esc(r.user_provided_name || (r.client_properties || {}).product || "")],
    ["Channels", (r) => r.channels], ["State", (r) => esc(r.state)],
    ["", (r) => `<button class="close-connection" data-name="${esc(r.name)}">Close</button>`],
  ], rows, "connections-table"));
  main.querySelectorAll(".close-connection").forEach((b) => b.onclick = async () => {
    await api("DELETE", `/api/connections/${enc(b.dataset.name)}`).catch(fail);
    route();
  });
}

// Stream Connections, as RabbitMQ's rabbitmq_stream_management adds it: the stream protocol's
// connections, each with its publishers and consumers (/api/stream/...).
async function streamConnections() {
  const rows = await api("GET", "/api/stream/connections");
  show(`<h2>Stream connections</h2>` + table([
    ["Name", (r) => `<a class="stream-connection-link" href="#/stream-connection/${enc(r.vhost)}/${enc(r.name)}">${esc(r.name)}</a>`],
    ["User", (r) => esc(r.user)], ["Vhost", (r) => esc(r.vhost)],
    ["Client", (r) => esc((r.client_properties || {}).connection_name || (r.client_properties || {}).product || "")],
    ["TLS", (r) => r.ssl ? "yes" : "no"], ["Heartbeat (s)", (r) => r.heartbeat],
    ["Frame max (bytes)", (r) => r.frame_max], ["Subscriptions", (r) => r.subscriptions],
    ["", (r) => `<button class="close-stream-connection" data-vhost="${esc(r.vhost)}" data-name="${esc(r.name)}">Close</button>`],
  ], rows, "stream-connections-table"));
  main.querySelectorAll(".close-stream-connection").forEach((b) => b.onclick = async () => {
    await api("DELETE", `/api/stream/connections/${enc(b.dataset.vhost)}/${enc(b.dataset.name)}`).catch(fail);
    route();
  });
}

const STREAM_PUBLISHER_COLUMNS = [
  ["Stream", (r) => esc(r.queue.name)], ["Connection", (r) => esc(r.connection_details.name)],
  ["Publisher id", (r) => r.publisher_id], ["Reference", (r) => esc(r.reference)],
  ["Published", (r) => r.published], ["Confirmed", (r) => r.confirmed], ["Errored", (r) => r.errored],
];
const STREAM_CONSUMER_COLUMNS = [
  ["Stream", (r) => esc(r.queue.name)], ["Connection", (r) => esc(r.connection_details.name)],
  ["Subscription id", (r) => r.subscription_id], ["Credits", (r) => r.credits],
  ["Consumed", (r) => r.consumed], ["Offset", (r) => r.offset], ["Offset lag", (r) => r.offset_lag],
  ["Active", (r) => esc(r.activity_status)],
];

async function streamConnection(vhost, name) {
  const base = `/api/stream/connections/${enc(vhost)}/${enc(name)}`;
  const [c, pubs, cons] = await Promise.all([
    api("GET", base), api("GET", `${base}/publishers`), api("GET", `${base}/consumers`)]);
  show(`<h2 id="stream-connection-title">Stream connection ${esc(c.name)}</h2>
    <section class="card">user ${esc(c.user)}, vhost ${esc(c.vhost)}, ${esc(c.auth_mechanism)},
      heartbeat ${c.heartbeat} s, frame max ${c.frame_max} bytes; client properties
      <code>${esc(JSON.stringify(c.client_properties))}</code></section>
    <h3>Publishers</h3>${table(STREAM_PUBLISHER_COLUMNS, pubs, "stream-publishers-table")}
    <h3>Consumers</h3>${table(STREAM_CONSUMER_COLUMNS, cons, "stream-consumers-table")}`);
}

async function channels() {
  const rows = await api("GET", "/api/channels");
  show(`<h2>Channels</h2>` + table([
    ["Channel", (r) => esc(r.name)], ["User", (r) => esc(r.user)],
    ["Confirm", (r) => r.confirm], ["Prefetch", (r) => r.prefetch_count],
    ["Unacked", (r) => r.messages_unacknowledged], ["Consumers", (r) => r.consumer_count],
  ], rows, "channels-table"));
}

async function exchanges() {
  const rows = await api("GET", "/api/exchanges");
  show(`<h2>Exchanges</h2>` + table([
    ["Vhost", (r) => esc(r.vhost)], ["Name", (r) => esc(r.name || "(AMQP default)")],
    ["Type", (r) => esc(r.type === "x-delayed-message"
      ? `${r.type} (${(r.arguments || {})["x-delayed-type"]})` : r.type)],
    ["Durable", (r) => r.durable],
    // x-delayed-message exchanges: how many messages wait, and when the next one is due
    ["Delayed", (r) => r.messages_delayed === undefined ? "" : esc(`${r.messages_delayed}`
      + (r.messages_delayed_next_due ? ` (next ${r.messages_delayed_next_due})` : ""))],
  ], rows, "exchanges-table") + `<form id="add-exchange" class="card"><h3>Add an exchange</h3>
    <label>Name <input id="add-exchange-name" required></label>
    <label>Type <select id="add-exchange-type">${["direct", "fanout", "topic", "headers",
      "x-consistent-hash", "x-modulus-hash", "x-delayed-message"].map((t) => `<option>${t}</option>`).join("")}</select></label>
    <label>Delayed type (x-delayed-message) <select id="add-exchange-delayed-type">${["direct",
      "fanout", "topic", "headers"].map((t) => `<option>${t}</option>`).join("")}</select></label>
    <label>Vhost <input id="add-exchange-vhost" value="/"></label>
    <button id="add-exchange-button" type="submit">Add exchange</button>
    <p class="error" id="page-error"></p></form>`);
  document.getElementById("add-exchange").onsubmit = async (e) => {
    e.preventDefault();
    const name = document.getElementById("add-exchange-name").value;
    const vhost = document.getElementById("add-exchange-vhost").value;
    const type = document.getElementById("add-exchange-type").value;
    const args = type === "x-delayed-message"
      ? { "x-delayed-type": document.getElementById("add-exchange-delayed-type").value } : {};
    await api("PUT", `/api/exchanges/${enc(vhost)}/${enc(name)}`,
      { type, durable: true, arguments: args })
      .then(route, fail);
  };
}

// RabbitMQ's queue types as its add-queue form offers them: the value becomes x-queue-type;
// quorum queues and streams are always durable and never auto-deleted, so for them the form
// hides those two fields and sends durable true, auto_delete false (3.10.8's queues.ejs).
const QUEUE_TYPES = [["classic", "Classic"], ["quorum", "Quorum"], ["stream", "Stream"]];

async function queues() {
  const rows = await api("GET", "/api/queues");
  show(`<h2>Queues</h2>` + table([
    ["Vhost", (r) => esc(r.vhost)],
    ["Name", (r) => `<a class="queue-link" href="#/queue/${enc(r.vhost)}/${enc(r.name)}">${esc(r.name)}</a>`],
    ["Type", (r) => esc(r.type)],
    ["Ready", (r) => r.messages_ready], ["Unacked", (r) => r.messages_unacknowledged],
    ["Total", (r) => r.messages], ["Consumers", (r) => r.consumers],
    ["Policy", (r) => esc(r.policy || "")],
  ], rows, "queues-table") + `<form id="add-queue" class="card"><h3>Add a queue</h3>
    <label>Type <select id="add-queue-type">${QUEUE_TYPES.map(([v, t]) =>
      `<option value="${v}">${t}</option>`).join("")}</select></label>
    <label>Name <input id="add-queue-name" required></label>
    <label>Vhost <input id="add-queue-vhost" value="/"></label>
    <label id="add-queue-durable-label">Durable <input id="add-queue-durable" type="checkbox" checked></label>
    <label id="add-queue-auto-delete-label">Auto delete <input id="add-queue-auto-delete" type="checkbox"></label>
    <button id="add-queue-button" type="submit">Add queue</button>
    <p class="error" id="page-error"></p></form>`);
  const type = document.getElementById("add-queue-type");
  type.onchange = () => {
    const classic = type.value === "classic";
    document.getElementById("add-queue-durable-label").hidden = !classic;
    document.getElementById("add-queue-auto-delete-label").hidden = !classic;
  };
  document.getElementById("add-queue").onsubmit = async (e) => {
    e.preventDefault();
    const name = document.getElementById("add-queue-name").value;
    const vhost = document.getElementById("add-queue-vhost").value;
    const classic = type.value === "classic";
    await api("PUT", `/api/queues/${enc(vhost)}/${enc(name)}`, {
      durable: !classic || document.getElementById("add-queue-durable").checked,
      auto_delete: classic && document.getElementById("add-queue-auto-delete").checked,
      arguments: { "x-queue-type": type.value },
    }).then(route, fail);
  };
}

async function queue(vhost, name) {
  const base = `/api/queues/${enc(vhost)}/${enc(name)}`;
  const q = await api("GET", base);
  show(`<h2 id="queue-title">Queue ${esc(q.name)} <small>(vhost ${esc(q.vhost)})</small></h2>
    <section class="card"><span id="queue-ready">${q.messages_ready}</span> ready,
      <span id="queue-unacked">${q.messages_unacknowledged}</span> unacked,
      ${q.consumers} consumers; arguments <code>${esc(JSON.stringify(q.arguments))}</code>;
      policy ${esc(q.policy || "none")}</section>
    <form id="publish-form" class="card"><h3>Publish message</h3>
      <label>Payload <textarea id="publish-payload" rows="2" cols="50"></textarea></label>
      <label>Delivery mode <select id="publish-mode"><option value="1">1 - non-persistent</option>
        <option value="2">2 - persistent</option></select></label>
      <button id="publish-button" type="submit">Publish message</button>
      <span id="publish-result"></span></form>
    <form id="get-form" class="card"><h3>Get messages</h3>
      <label>Ack mode <select id="get-ackmode"><option>ack_requeue_true</option>
        <option>ack_requeue_false</option><option>reject_requeue_true</option>
        <option>reject_requeue_false</option></select></label>
      <label>Messages <input id="get-count" type="number" value="1" min="1"></label>
      <button id="get-button" type="submit">Get message(s)</button>
      <div id="get-results"></div></form>
    <section class="card"><h3>Browse (without consuming)</h3>
      <button id="browse-button" type="button">Show ready messages</button><div id="browse-results"></div></section>
    <div id="stream-sections"></div>
    <section class="card"><button id="purge-button" type="button">Purge messages</button>
      <button id="delete-button" type="button">Delete queue</button>
      <p class="error" id="page-error"></p></section>`);
  if (q.type === "stream") {  // the stream protocol's publishers and consumers of this stream
    const [pubs, cons] = await Promise.all([
      api("GET", `/api/stream/publishers/${enc(vhost)}/${enc(name)}`),
      api("GET", `/api/stream/consumers/${enc(vhost)}`)]);
    document.getElementById("stream-sections").innerHTML =
      `<h3>Stream publishers</h3>${table(STREAM_PUBLISHER_COLUMNS, pubs, "stream-publishers-table")}
       <h3>Stream consumers</h3>${table(STREAM_CONSUMER_COLUMNS,
         cons.filter((r) => r.queue.name === name), "stream-consumers-table")}`;
  }
  document.getElementById("publish-form").onsubmit = async (e) => {
    e.preventDefault();
    const r = await api("POST", `/api/exchanges/${enc(vhost)}/amq.default/publish`, {
      routing_key: name, payload: document.getElementById("publish-payload").value,
      payload_encoding: "string",
      properties: { delivery_mode: Number(document.getElementById("publish-mode").value) },
    }).catch(fail);
    if (r) document.getElementById("publish-result").textContent =
      r.routed ? "Message published." : "Message published, but not routed.";
  };
  const render = (msgs) => msgs.map((m, i) => `<div class="message"><b>Message ${i + 1}</b>
    (redelivered: ${m.redelivered})<pre class="payload">${esc(m.payload)}</pre></div>`).join("")
    || "<p>Queue is empty</p>";
  document.getElementById("get-form").onsubmit = async (e) => {
    e.preventDefault();
    const msgs = await api("POST", `${base}/get`, {
      count: Number(document.getElementById("get-count").value),
      ackmode: document.getElementById("get-ackmode").value, encoding: "auto", truncate: 50000,
    }).catch(fail);
    if (msgs) document.getElementById("get-results").innerHTML = render(msgs);
  };
  document.getElementById("browse-button").onclick = async () => {
    const msgs = await api("GET", `${base}/messages?count=50`).catch(fail);
    if (msgs) document.getElementById("browse-results").innerHTML = render(msgs);
  };
  document.getElementById("purge-button").onclick = async () => {
    await api("DELETE", `${base}/contents`).then(() => queue(vhost, name), fail);
  };
  document.getElementById("delete-button").onclick = async () => {
    await api("DELETE", base).then(() => { location.hash = "#/queues"; }, fail);
  };
}

async function users() {
  const rows = await api("GET", "/api/users");
  show(`<h2>Users</h2>` + table([["Name", (r) => esc(r.name)],
    ["Tags", (r) => esc([].concat(r.tags).join(", "))]], rows, "users-table")
    + `<form id="add-user" class="card"><h3>Add a user</h3>
    <label>Username <input id="add-user-name" required></label>
    <label>Password <input id="add-user-password" type="password" required></label>
    <label>Tags <input id="add-user-tags" placeholder="administrator, management"></label>
    <button id="add-user-button" type="submit">Add user</button><p class="error" id="page-error"></p></form>`);
  document.getElementById("add-user").onsubmit = async (e) => {
    e.preventDefault();
    await api("PUT", `/api/users/${enc(document.getElementById("add-user-name").value)}`, {
      password: document.getElementById("add-user-password").value,
      tags: document.getElementById("add-user-tags").value,
    }).then(route, fail);
  };
}

async function vhosts() {
  const rows = await api("GET", "/api/vhosts");
  show(`<h2>Virtual hosts</h2>` + table([["Name", (r) => esc(r.name)],
    ["Messages", (r) => r.messages], ["Description", (r) => esc(r.description)]], rows, "vhosts-table")
    + `<form id="add-vhost" class="card"><h3>Add a virtual host</h3>
    <label>Name <input id="add-vhost-name" required></label>
    <button id="add-vhost-button" type="submit">Add virtual host</button><p class="error" id="page-error"></p></form>`);
  document.getElementById("add-vhost").onsubmit = async (e) => {
    e.preventDefault();
    await api("PUT", `/api/vhosts/${enc(document.getElementById("add-vhost-name").value)}`, {})
      .then(route, fail);
  };
}

async function permissions() {
  const rows = await api("GET", "/api/permissions");
  show(`<h2>Permissions</h2>` + table([["User", (r) => esc(r.user)], ["Vhost", (r) => esc(r.vhost)],
    ["Configure", (r) => esc(r.configure)], ["Write", (r) => esc(r.write)], ["Read", (r) => esc(r.read)]],
    rows, "permissions-table") + `<form id="set-permission" class="card"><h3>Set permission</h3>
    <label>User <input id="perm-user" required></label><label>Vhost <input id="perm-vhost" value="/"></label>
    <label>Configure <input id="perm-configure" value=".*"></label>
    <label>Write <input id="perm-write" value=".*"></label><label>Read <input id="perm-read" value=".*"></label>
    <button id="set-permission-button" type="submit">Set permission</button><p class="error" id="page-error"></p></form>`);
  document.getElementById("set-permission").onsubmit = async (e) => {
    e.preventDefault();
    const v = (id) => document.getElementById(id).value;
    await api("PUT", `/api/permissions/${enc(v("perm-vhost"))}/${enc(v("perm-user"))}`,
      { configure: v("perm-configure"), write: v("perm-write"), read: v("perm-read") })
      .then(route, fail);
  };
}

// The keys RabbitMQ's policy form offers, grouped by what takes them (3.10.8's
// policies.ejs); a click adds the key with an example value to the definition.
const POLICY_KEYS = [
  ["Queues [All types]", [["max-length", 1000], ["max-length-bytes", 1048576],
    ["overflow", "reject-publish"], ["expires", 1800000], ["dead-letter-exchange", ""],
    ["dead-letter-routing-key", ""]]],
  ["Queues [Classic]", [["message-ttl", 60000], ["queue-mode", "lazy"], ["confirm-on", "persist"]]],
  ["Queues [Quorum]", [["max-in-memory-length", 1000], ["max-in-memory-bytes", 1048576],
    ["delivery-limit", 20], ["dead-letter-strategy", "at-least-once"], ["message-ttl", 60000]]],
  ["Queues [Stream]", [["max-age", "7D"]]],
  ["Exchanges", [["alternate-exchange", ""]]],
  ["Federation", [["federation-upstream-set", "all"], ["federation-upstream", ""]]],
];

function addPolicyKey(key, value) {
  const field = document.getElementById("policy-definition");
  let definition = {};
  try { definition = JSON.parse(field.value || "{}"); } catch (err) { definition = {}; }
  if (!(key in definition)) definition[key] = value;
  field.value = JSON.stringify(definition);
}

async function policies() {
  const rows = await api("GET", "/api/policies");
  show(`<h2>Policies</h2>` + table([["Vhost", (r) => esc(r.vhost)], ["Name", (r) => esc(r.name)],
    ["Pattern", (r) => esc(r.pattern)], ["Apply to", (r) => esc(r["apply-to"])],
    ["Definition", (r) => esc(JSON.stringify(r.definition))], ["Priority", (r) => r.priority],
    ["", (r) => `<button class="clear-policy" data-vhost="${esc(r.vhost)}" data-name="${esc(r.name)}">Delete</button>`]],
    rows, "policies-table") + `<form id="add-policy" class="card"><h3>Add / update a policy</h3>
    <label>Name <input id="policy-name" required></label><label>Vhost <input id="policy-vhost" value="/"></label>
    <label>Pattern <input id="policy-pattern" required></label>
    <label>Apply to <select id="policy-apply-to"><option>all</option><option>queues</option><option>exchanges</option></select></label>
    <label>Priority <input id="policy-priority" type="number" value="0"></label>
    <label>Definition (JSON) <input id="policy-definition" value='{"max-length": 1000}' size="40"></label>
    <div id="policy-keys">${POLICY_KEYS.map(([group, keys]) => `<p>${esc(group)}: ${keys.map(([k]) =>
      `<button type="button" class="policy-key" data-key="${esc(k)}">${esc(k)}</button>`).join(" ")}</p>`).join("")}</div>
    <button id="add-policy-button" type="submit">Add / update policy</button><p class="error" id="page-error"></p></form>`);
  const examples = new Map(POLICY_KEYS.flatMap(([, keys]) => keys));
  main.querySelectorAll(".policy-key").forEach((b) => b.onclick = () =>
    addPolicyKey(b.dataset.key, examples.get(b.dataset.key)));
  main.querySelectorAll(".clear-policy").forEach((b) => b.onclick = async () => {
    await api("DELETE", `/api/policies/${enc(b.dataset.vhost)}/${enc(b.dataset.name)}`).then(route, fail);
  });
  document.getElementById("add-policy").onsubmit = async (e) => {
    e.preventDefault();
    const v = (id) => document.getElementById(id).value;
    let definition;
    try { definition = JSON.parse(v("policy-definition")); } catch (err) { fail(err); return; }
    await api("PUT", `/api/policies/${enc(v("policy-vhost"))}/${enc(v("policy-name"))}`, {
      pattern: v("policy-pattern"), definition, priority: Number(v("policy-priority")),
      "apply-to": v("policy-apply-to"),
    }).then(route, fail);
  };
}

// Admin > Federation Status and Shovel Status, as RabbitMQ's federation and shovel
// management plugins show them: one row per link with its state and last error.
async function federation() {
  const rows = await api("GET", "/api/federation-links");
  show(`<h2>Federation status</h2>` + table([
    ["Upstream", (r) => esc(r.upstream)], ["URI", (r) => esc(r.uri)], ["Vhost", (r) => esc(r.vhost)],
    ["Exchange / queue", (r) => esc(r.exchange !== undefined ? `exchange ${r.exchange}` : `queue ${r.queue}`)],
    ["State", (r) => `<span class="state-${esc(r.status)}">${esc(r.status)}</span>`],
    ["Error", (r) => esc(r.error || "")], ["Since", (r) => esc(r.timestamp)],
    ["", (r) => `<button class="restart-link" data-vhost="${esc(r.vhost)}" data-id="${esc(r.id)}" data-node="${esc(r.node)}">Restart</button>`],
  ], rows, "federation-table"));
  main.querySelectorAll(".restart-link").forEach((b) => b.onclick = async () => {
    await api("DELETE", `/api/federation-links/vhost/${enc(b.dataset.vhost)}/${enc(b.dataset.id)}/${enc(b.dataset.node)}/restart`).then(route, fail);
  });
}

async function shovels() {
  const rows = await api("GET", "/api/shovels");
  show(`<h2>Shovel status</h2>` + table([
    ["Name", (r) => esc(r.name)], ["Vhost", (r) => esc(r.vhost)],
    ["Source", (r) => esc(`${r.src_uri} ${r.src_address !== undefined ? `address ${r.src_address}` : r.src_queue !== undefined ? `queue ${r.src_queue}` : `exchange ${r.src_exchange}`}`)],
    ["Destination", (r) => esc(`${r.dest_uri} ${r.dest_address !== undefined ? `address ${r.dest_address}` : r.dest_queue !== undefined ? `queue ${r.dest_queue}` : `exchange ${r.dest_exchange || ""}`}`)],
    ["State", (r) => `<span class="state-${esc(r.state)}">${esc(r.state)}</span>`],
    ["Moved", (r) => r.messages_moved], ["Reason", (r) => esc(r.reason || "")], ["Since", (r) => esc(r.timestamp)],
    ["", (r) => `<button class="restart-shovel" data-vhost="${esc(r.vhost)}" data-name="${esc(r.name)}">Restart</button>`],
  ], rows, "shovels-table"));
  main.querySelectorAll(".restart-shovel").forEach((b) => b.onclick = async () => {
    await api("DELETE", `/api/shovels/vhost/${enc(b.dataset.vhost)}/${enc(b.dataset.name)}/restart`).then(route, fail);
  });
}

const PAGES = { overview, connections, "stream-connections": streamConnections, channels, exchanges, queues, users, vhosts, permissions, policies, federation, shovels };

async function route() {
  stopCharts();
  if (await scriptedLogin()) return;
  if (!auth()) { showLogin(); return; }
  nav.hidden = false;
  const whoami = document.getElementById("whoami");
  if (!whoami.textContent) {  // a reload keeps the login (sessionStorage), not the name shown
    api("GET", "/api/whoami").then((me) => { whoami.textContent = `User ${me.name}`; }, () => {});
  }
  const [, page = "overview", ...rest] = location.hash.replace(/^#/, "").split("/");
  nav.querySelectorAll("a").forEach((a) => a.classList.toggle("active", a.dataset.page === page));
  try {
    if (page === "queue") await queue(decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join("/")));
    else if (page === "stream-connection") await streamConnection(decodeURIComponent(rest[0]), decodeURIComponent(rest.slice(1).join("/")));
    else await (PAGES[page] || overview)();
  } catch (err) { fail(err); }
}

// base64 of the UTF-8 bytes (btoa alone takes only Latin-1), as Basic credentials are sent
const basic = (user, password) =>
  btoa(String.fromCharCode(...new TextEncoder().encode(`${user}:${password}`)));

// Checks the credentials against /api/whoami; on success keeps them for the tab and shows the
// user's name. Returns whether they were good.
async function logIn(token) {
  const resp = await fetch("/api/whoami",
    { headers: { Authorization: "Basic " + token }, credentials: "omit" });
  if (!resp.ok) return false;
  const me = await resp.json();
  sessionStorage.setItem("auth", token);
  document.getElementById("whoami").textContent = `User ${me.name}`;
  return true;
}

// RabbitMQ's scripted login (its main.js login_route): #/login/<user>/<password> logs in and
// opens the overview, #/login/<user>/<password>/<page...> opens that page; both parts are
// URI-encoded. The URL with the password is replaced in the tab's history, not kept.
// Returns true when it was such a login and it failed (the login form is shown).
async function scriptedLogin() {
  const m = location.hash.match(/^#\/login\/([^/]*)\/([^/]*)(?:\/(.*))?$/);
  if (!m) return false;
  window.history.replaceState(null, "", `#/${m[3] || ""}`);  // the overview, or the page asked for
  const dec = (v) => { try { return decodeURIComponent(v); } catch (err) { return v; } };
  if (await logIn(basic(dec(m[1]), dec(m[2])))) return false;
  sessionStorage.removeItem("auth");
  showLogin();
  document.getElementById("login-error").textContent = "Login failed";
  return true;
}

function showLogin() {
  nav.hidden = true;
  show(`<form id="login-form" class="card"><h2>Log in</h2>
    <label>Username <input id="username" autocomplete="username"></label>
    <label>Password <input id="password" type="password" autocomplete="current-password"></label>
    <button id="login-button" type="submit">Log in</button><p id="login-error" class="error"></p></form>`);
  document.getElementById("login-form").onsubmit = async (e) => {
    e.preventDefault();
    const token = basic(document.getElementById("username").value,
      document.getElementById("password").value);
    if (await logIn(token)) route();
    else document.getElementById("login-error").textContent = "Login failed";
  };
}

function logout() {
  sessionStorage.removeItem("auth");
  document.getElementById("whoami").textContent = "";
  stopCharts();
  showLogin();
}

document.getElementById("logout-button").onclick = logout;
window.addEventListener("hashchange", route);
route();
