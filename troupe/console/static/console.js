// The Troupe console: vanilla JavaScript, no build step. Views are chosen by the URL's hash
// (#/, #/responses/ID, #/threads/ID, #/sessions, #/sessions/ID, #/evals, #/evals/ID,
// #/evals/compare?a=&b=, #/webhooks, #/webhooks/ID) and drawn from the JSON under
// /v1/troupe/console (troupe/console/api.py), the webhooks views from the API itself
// (GET /v1/webhook_endpoints and its deliveries, the key's own tenant's). Text from the
// server is always set as text, never parsed as HTML.
"use strict";
(() => {
  const KEY = "troupe-console-key"; // sessionStorage: the API key, sent as a Bearer header
  const ROOT = location.pathname.replace(/\/console\/?$/, ""); // "" or a route prefix
  const API = ROOT + "/v1/troupe/console";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const RANGES = { "": "any time", "900": "last 15 min", "3600": "last hour", "86400": "last 24 h", "604800": "last 7 days" };
  const STATUSES = ["", "completed", "incomplete", "failed", "cancelled", "in_progress", "queued"];
  const STATS_WINDOW_S = 60;
  const STATS_EVERY_MS = 5000;
  const WEBHOOKS_EVERY_MS = 5000; // the delivery logs' refresh

  const view = document.getElementById("view");
  let me = null; // {tenant, admin, keys}
  let generation = 0; // the view being drawn: an answer for an older one is dropped
  let poller = null;

  class NeedsKey extends Error {}

  // -- plumbing ---------------------------------------------------------------------------

  // GET base + path with the tab's key: the console's JSON (api) or the API itself (v1). A 401
  // asks for a key.
  async function request(base, path, params = {}) {
    const url = new URL(base + path, location.href);
    for (const [name, value] of Object.entries(params)) {
      if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, value);
    }
    const headers = { Accept: "application/json" };
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = "Bearer " + key;
    const reply = await fetch(url, { headers });
    const body = await reply.json().catch(() => null);
    const message = body && body.error ? body.error.message : `${reply.status} ${reply.statusText}`;
    if (reply.status === 401) {
      showLogin(key ? "That key was refused." : "This server needs an API key.");
      throw new NeedsKey(message);
    }
    if (!reply.ok) throw new Error(message);
    return body;
  }

  const api = (path, params) => request(API, path, params);
  const v1 = (path, params) => request(ROOT + "/v1", path, params);

  function append(el, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  function attrs(el, values) {
    for (const [name, value] of Object.entries(values || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
      else el.setAttribute(name === "className" ? "class" : name, value === true ? "" : String(value));
    }
    return el;
  }

  const h = (tag, values, ...children) => append(attrs(document.createElement(tag), values), children);
  const s = (tag, values, ...children) => append(attrs(document.createElementNS(SVG_NS, tag), values), children);

  function when(unix) {
    return unix === null || unix === undefined ? "–" : new Date(unix * 1000).toLocaleString();
  }

  function secs(value) {
    if (value === null || value === undefined) return "–";
    if (value === 0) return "0";
    if (value < 1) return `${(value * 1000).toFixed(value < 0.01 ? 1 : 0)} ms`;
    return `${value.toFixed(value < 10 ? 2 : 1)} s`;
  }

  const count = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;
  const pct = (value) => (value === null || value === undefined ? "–" : `${(100 * value).toFixed(1)}%`);
  const statusBadge = (status) => h("span", { class: `status ${status || ""}` }, status || "–");

  function link(hash, text) {
    return h("a", { href: hash }, text);
  }

  // Response ids are long (the thread's id is part of them): a table shows their start.
  function shortId(id) {
    return id.length > 34 ? h("span", { title: id }, id.slice(0, 32) + "…") : id;
  }

  function hashOf(path, params = {}) {
    const query = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) {
      if (value !== undefined && value !== null && value !== "") query.set(name, value);
    }
    const text = query.toString();
    return "#" + path + (text ? "?" + text : "");
  }

  // An admin reads another tenant's objects by naming it; a tenant's key needs no name.
  const tenantParams = (tenant) => (me && me.admin ? { tenant } : {});
  const responseHash = (id, tenant) => hashOf(`/responses/${encodeURIComponent(id)}`, tenantParams(tenant));
  const threadHash = (id, tenant) => hashOf(`/threads/${encodeURIComponent(id)}`, tenantParams(tenant));
  const sessionHash = (id, tenant) => hashOf(`/sessions/${encodeURIComponent(id)}`, tenantParams(tenant));
  const webhookHash = (id) => hashOf(`/webhooks/${encodeURIComponent(id)}`);
  const navOf = (part) => (["evals", "sessions", "webhooks"].includes(part) ? part : "responses");

  // -- who is looking ----------------------------------------------------------------------

  function showWho() {
    const who = document.getElementById("who");
    const key = sessionStorage.getItem(KEY);
    if (me.admin) who.textContent = "admin key: every tenant";
    else if (me.keys) who.textContent = `tenant ${me.tenant}`;
    else who.textContent = "no API keys configured: open";
    // Without a key the field stays: an admin key may be configured even when tenants need none.
    document.getElementById("login").hidden = Boolean(key);
    document.getElementById("logout").hidden = !key;
  }

  function showLogin(message) {
    me = null;
    document.getElementById("who").textContent = message || "";
    document.getElementById("login").hidden = false;
    document.getElementById("logout").hidden = !sessionStorage.getItem(KEY);
  }

  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("key");
    if (input.value.trim()) sessionStorage.setItem(KEY, input.value.trim());
    input.value = "";
    me = null;
    route();
  });

  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    me = null;
    route();
  });

  // -- routing ------------------------------------------------------------------------------

  function parseHash() {
    const raw = location.hash.replace(/^#/, "") || "/";
    const [path, query = ""] = raw.split("?");
    return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query) };
  }

  async function route() {
    const mine = ++generation;
    clearInterval(poller);
    poller = null;
    const { parts, params } = parseHash();
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === navOf(parts[0]));
    }
    view.dataset.state = "loading";
    try {
      if (!me) me = await api("/me");
      showWho();
      let node;
      if (parts[0] === "responses" && parts[1]) node = await responseView(parts[1], params);
      else if (parts[0] === "threads" && parts[1]) node = await threadView(parts[1], params);
      else if (parts[0] === "sessions" && parts[1]) node = await sessionView(parts[1], params);
      else if (parts[0] === "sessions") node = await sessionsView(params);
      else if (parts[0] === "evals" && parts[1] === "compare") node = await compareView(params);
      else if (parts[0] === "evals" && parts[1]) node = await evalView(parts[1]);
      else if (parts[0] === "evals") node = await evalsView();
      else if (parts[0] === "webhooks" && parts[1]) node = await webhookView(parts[1], mine);
      else if (parts[0] === "webhooks") node = await webhooksView(mine);
      else node = await responsesView(params, mine);
      if (mine !== generation) return;
      view.replaceChildren(node);
      const nav = navOf(parts[0]);
      view.dataset.view = nav === "evals" ? "evals" : parts[1] ? parts[0].replace(/s$/, "") : nav;
      view.dataset.state = "ready";
    } catch (error) {
      if (mine !== generation) return;
      const text = error instanceof NeedsKey ? "This server needs an API key: enter one above." : error.message;
      view.replaceChildren(h("p", { class: error instanceof NeedsKey ? "muted" : "error" }, text));
      view.dataset.state = "error";
    }
  }

  window.addEventListener("hashchange", route);

  // -- recent responses and live figures ------------------------------------------------------

  function filtersForm(params, models) {
    const field = (label, control) => h("label", {}, label, control);
    const select = (name, options, chosen) =>
      h("select", { name }, Object.entries(options).map(([value, text]) => h("option", { value, selected: value === chosen }, text)));
    const localTime = (unix) => (unix ? new Date(unix * 1000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 16) : "");
    const form = h(
      "form",
      { class: "filters card" },
      field("Model", h("input", { name: "model", value: params.get("model") || "", list: "models", placeholder: "any" })),
      h("datalist", { id: "models" }, models.map((m) => h("option", { value: m }))),
      field("Status", select("status", Object.fromEntries(STATUSES.map((st) => [st, st || "any"])), params.get("status") || "")),
      me.admin ? field("Tenant", h("input", { name: "tenant", value: params.get("tenant") ?? "", placeholder: "every tenant", size: 14 })) : null,
      field("Created", select("range", RANGES, params.get("range") || "")),
      field("From", h("input", { type: "datetime-local", name: "from", value: localTime(Number(params.get("since"))) })),
      field("To", h("input", { type: "datetime-local", name: "to", value: localTime(Number(params.get("until"))) })),
      h("button", { type: "submit" }, "Filter"),
      h("button", { type: "button", onclick: () => (location.hash = "#/") }, "Clear"),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const data = new FormData(form);
      const unix = (value) => (value ? String(Math.floor(new Date(value).getTime() / 1000)) : "");
      location.hash = hashOf("/", {
        model: data.get("model").trim(),
        status: data.get("status"),
        tenant: me.admin ? data.get("tenant").trim() || null : null,
        range: data.get("from") ? "" : data.get("range"),
        since: unix(data.get("from")),
        until: unix(data.get("to")),
      });
    });
    return form;
  }

  function filterQuery(params) {
    const range = Number(params.get("range") || 0);
    return {
      model: params.get("model"),
      status: params.get("status"),
      tenant: me.admin ? params.get("tenant") : null,
      since: range ? Math.floor(Date.now() / 1000) - range : params.get("since"),
      until: params.get("until"),
    };
  }

  function liveMetrics(tenant, mine) {
    const tiles = h("div", { class: "metrics" });
    const rates = []; // requests/s at each poll, for the sparkline
    const card = h(
      "div",
      { class: "card", id: "live" },
      h("h2", { style: "margin-top:0" }, "Live ", h("span", { class: "muted" }, `(last ${STATS_WINDOW_S} s, from the stored responses)`)),
      tiles,
    );
    const tile = (label, value, extra) => h("div", { class: "metric" }, h("div", { class: "value" }, value), h("div", { class: "label" }, label), extra || null);
    async function poll() {
      try {
        const st = await api("/stats", { window_s: STATS_WINDOW_S, tenant });
        if (mine !== generation) return;
        rates.push(st.requests_per_s);
        if (rates.length > 36) rates.shift();
        tiles.replaceChildren(
          tile("requests/s", st.requests_per_s.toFixed(2), sparkline(rates)),
          tile("TTFT p50", secs(st.ttft_p50_s)),
          tile("TTFT p99", secs(st.ttft_p99_s)),
          tile("errors", String(st.errors), h("div", { class: "label" }, `${pct(st.error_rate)} of ${st.responses}`)),
          tile("live conversations", String(st.threads), h("div", { class: "label" }, "with a response in the window")),
          tile("end to end p50", secs(st.e2e_p50_s)),
          tile("end to end p99", secs(st.e2e_p99_s)),
        );
      } catch (error) {
        if (!(error instanceof NeedsKey)) tiles.replaceChildren(h("p", { class: "error" }, error.message));
      }
    }
    poll();
    poller = setInterval(poll, STATS_EVERY_MS);
    return card;
  }

  function sparkline(values) {
    const w = 120, ht = 24, top = Math.max(...values, 1e-9);
    const points = values.map((v, i) => `${(i / Math.max(values.length - 1, 1)) * w},${ht - (v / top) * (ht - 2) - 1}`);
    return s("svg", { width: w, height: ht, viewBox: `0 0 ${w} ${ht}` }, s("polyline", { points: points.join(" "), fill: "none", stroke: "#4c78a8", "stroke-width": 1.5 }));
  }

  function responsesTable(rows) {
    const body = h("tbody");
    const addRows = (page) => {
      for (const r of page) {
        const tr = h(
          "tr",
          { class: "row", onclick: () => (location.hash = responseHash(r.id, r.tenant)) },
          h("td", {}, when(r.created_at)),
          h("td", { class: "mono" }, link(responseHash(r.id, r.tenant), shortId(r.id))),
          me.admin ? h("td", {}, r.tenant === "" ? h("span", { class: "muted" }, '""') : r.tenant) : null,
          h("td", {}, r.model || "–"),
          h("td", {}, statusBadge(r.status), r.error_code ? h("span", { class: "muted" }, " " + r.error_code) : null),
          h("td", { class: "num" }, secs(r.ttft_s)),
          h("td", { class: "num" }, secs(r.e2e_s)),
          h("td", { class: "num" }, `${r.input_tokens ?? "–"} / ${r.output_tokens ?? "–"}`),
          h("td", { class: "mono" }, r.conversation_id ? link(threadHash(r.thread_id, r.tenant), shortId(r.conversation_id)) : r.previous_response_id ? link(threadHash(r.thread_id, r.tenant), "chain") : ""),
        );
        body.append(tr);
      }
    };
    addRows(rows);
    const head = h(
      "thead",
      {},
      h("tr", {}, h("th", {}, "Created"), h("th", {}, "Response"), me.admin ? h("th", {}, "Tenant") : null, h("th", {}, "Model"), h("th", {}, "Status"), h("th", { class: "num" }, "TTFT"), h("th", { class: "num" }, "Duration"), h("th", { class: "num" }, "Tokens in / out"), h("th", {}, "Conversation")),
    );
    return { table: h("table", { id: "responses" }, head, body), addRows };
  }

  async function responsesView(params, mine) {
    const query = filterQuery(params);
    const [page, models] = await Promise.all([
      api("/responses", { ...query, limit: 50 }),
      fetchModels(),
    ]);
    const { table, addRows } = responsesTable(page.data);
    let last = page.last_id;
    const more = h("button", { type: "button", hidden: !page.has_more }, "Older responses");
    more.addEventListener("click", async () => {
      const next = await api("/responses", { ...query, limit: 50, after: last });
      addRows(next.data);
      last = next.last_id;
      more.hidden = !next.has_more;
    });
    return h(
      "div",
      {},
      liveMetrics(query.tenant, mine),
      filtersForm(params, models),
      h("h1", {}, "Recent responses"),
      page.data.length ? table : h("p", { class: "muted" }, "No stored response matches."),
      h("p", {}, more),
    );
  }

  async function fetchModels() {
    try {
      const headers = {};
      const key = sessionStorage.getItem(KEY);
      if (key) headers.Authorization = "Bearer " + key;
      const reply = await fetch(ROOT + "/v1/models", { headers });
      return reply.ok ? (await reply.json()).data.map((m) => m.id) : [];
    } catch {
      return [];
    }
  }

  // -- one response -------------------------------------------------------------------------

  function textOf(content) {
    if (typeof content === "string") return content;
    return (content || []).map((part) => part.text ?? part.refusal ?? `[${part.type}]`).join("\n");
  }

  function itemView(item) {
    const type = item.type || (item.role ? "message" : "item");
    let body;
    if (type === "message") body = h("pre", {}, h("b", {}, `${item.role}: `), textOf(item.content));
    else if (type === "function_call") body = h("pre", {}, `${item.name}(${item.arguments})`);
    else if (type === "function_call_output") body = h("pre", {}, typeof item.output === "string" ? item.output : JSON.stringify(item.output));
    else if (type === "mcp_call") body = h("pre", {}, `${item.server_label}.${item.name}(${item.arguments})\n→ ${item.output ?? item.error ?? ""}`);
    else if (type === "code_interpreter_call") body = codeView(item);
    else if (type === "shell_call") body = h("pre", {}, ((item.action || {}).commands || []).map((c) => `$ ${c}`).join("\n"));
    else if (type === "shell_call_output") body = h("pre", {}, (item.output || []).map(shellOutcome).join("\n"));
    else if (type === "reasoning") body = h("pre", {}, [...(item.summary || []), ...(item.content || [])].map((p) => p.text).join("\n") || "(reasoning)");
    else body = null;
    return h(
      "div",
      { class: `item ${type}` },
      h("div", { class: "type" }, type, item.call_id ? ` · ${item.call_id}` : "", item.status ? ` · ${item.status}` : ""),
      body,
      h("details", {}, h("summary", { class: "muted" }, "JSON"), h("pre", {}, JSON.stringify(item, null, 2))),
    );
  }

  // Code run in a container: the code, what it printed, and its figures (only data: images:
  // the console fetches nothing an item names).
  function codeView(item) {
    const outputs = item.outputs || [];
    const logs = outputs.filter((o) => o.type === "logs").map((o) => o.logs).join("");
    const images = outputs.filter((o) => o.type === "image" && /^data:image\/(png|jpeg|gif|webp);base64,/.test(o.url || ""));
    return h(
      "div",
      { class: "code-run" },
      h("div", { class: "muted" }, `container ${item.container_id || "?"}`),
      h("pre", { class: "code" }, item.code || ""),
      logs ? h("pre", { class: "logs" }, logs) : item.outputs ? null : h("div", { class: "muted" }, "(outputs not included)"),
      images.map((o) => h("img", { class: "figure", src: o.url, alt: "figure" })),
    );
  }

  function shellOutcome(o) {
    const outcome = o.outcome || {};
    const end = outcome.type === "exit" ? `[exit code ${outcome.exit_code}]` : `[${outcome.type || "?"}]`;
    return [o.stdout, o.stderr ? `[stderr]\n${o.stderr}` : "", end].filter(Boolean).join("");
  }

  function niceStep(span) {
    const raw = span / 6;
    const base = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 5, 10].map((m) => m * base).find((step) => step >= raw) || base * 10;
  }

  // An SVG chart of one row per bar (each with start_s and end_s) under a time axis; x(t) the
  // position of t seconds.
  function timeAxis(bars, { id, label, width, labels, rowH, top }) {
    const total = Math.max(...bars.map((b) => b.end_s), 1e-3);
    const height = top + bars.length * rowH + 6;
    const x = (t) => labels + (t / total) * (width - labels - 70);
    const chart = s("svg", { class: "gantt", id, viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": label });
    const step = niceStep(total);
    for (let t = 0; t <= total + step / 1000; t += step) {
      chart.append(s("line", { class: "axis", x1: x(t), x2: x(t), y1: top - 4, y2: height }));
      chart.append(s("text", { class: "tick", x: x(t), y: top - 8, "text-anchor": "middle" }, secs(t)));
    }
    return { chart, x };
  }

  // The Gantt chart: one row per step (parallel tool calls are overlapping bars on their
  // own rows), the critical path outlined. Each bar carries its times as data attributes.
  function gantt(bars) {
    if (!bars.length) return h("p", { class: "muted" }, "No step traces for this response.");
    const width = 1000, labels = 200, rowH = 24, top = 24;
    const { chart, x } = timeAxis(bars, { id: "timeline", label: "Step timeline", width, labels, rowH, top });
    bars.forEach((b, row) => {
      const y = top + row * rowH;
      if (row % 2 === 0) chart.append(s("rect", { class: "band", x: 0, y, width, height: rowH }));
      chart.append(s("text", { x: labels - 8, y: y + rowH / 2 + 4, "text-anchor": "end" }, `${b.kind} · ${b.name}`));
      const classes = ["step", b.kind, b.error ? "failed" : "", b.critical ? "critical" : ""].filter(Boolean).join(" ");
      const left = x(b.start_s);
      const barWidth = Math.max(2, x(b.end_s) - left);
      const details = [`#${b.seq} ${b.kind} ${b.name}`, `start +${secs(b.start_s)}, ${secs(b.end_s - b.start_s)}`];
      if (b.ttft_s !== null) details.push(`TTFT ${secs(b.ttft_s)}, tokens ${b.input_tokens} in / ${b.output_tokens} out`);
      if (b.call_id) details.push(b.call_id);
      if (b.detail) details.push(`${b.detail.stage}: ${b.detail.verdict}${b.detail.categories.length ? " (" + b.detail.categories.join(", ") + ")" : ""}`);
      if (b.error) details.push(`error: ${b.error}`);
      if (b.critical) details.push("on the critical path");
      chart.append(
        s(
          "rect",
          {
            class: classes, x: left, y: y + 5, width: barWidth, height: rowH - 10, rx: 2,
            "data-seq": b.seq, "data-kind": b.kind, "data-name": b.name,
            "data-start": b.start_s, "data-end": b.end_s, "data-critical": String(b.critical),
          },
          s("title", {}, details.join("\n")),
        ),
      );
      chart.append(s("text", { class: "tick", x: left + barWidth + 4, y: y + rowH / 2 + 4 }, secs(b.end_s - b.start_s)));
    });
    const legend = h(
      "div",
      { class: "legend" },
      h("span", {}, h("i", { style: "background:var(--model)" }), "model call"),
      h("span", {}, h("i", { style: "background:var(--tool)" }), "tool call"),
      h("span", {}, h("i", { style: "background:var(--guardrail)" }), "guardrail check"),
      h("span", {}, h("i", { style: "background:var(--error)" }), "failed"),
      h("span", {}, h("i", { style: "background:#fff;outline:2.5px solid var(--critical)" }), "critical path"),
    );
    return h("div", {}, legend, chart);
  }

  function stepsTable(bars) {
    return h(
      "details",
      {},
      h("summary", { class: "muted" }, `The ${bars.length} steps as a table`),
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, ["#", "kind", "name", "start", "duration", "TTFT", "tokens in / out", "critical", "error"].map((c) => h("th", {}, c)))),
        h(
          "tbody",
          {},
          bars.map((b) =>
            h(
              "tr",
              {},
              h("td", {}, b.seq), h("td", {}, b.kind), h("td", {}, b.name), h("td", { class: "num" }, "+" + secs(b.start_s)),
              h("td", { class: "num" }, secs(b.end_s - b.start_s)), h("td", { class: "num" }, secs(b.ttft_s)),
              h("td", { class: "num" }, b.kind === "model" ? `${b.input_tokens} / ${b.output_tokens}` : ""),
              h("td", {}, b.critical ? "yes" : ""),
              h("td", { class: "error" }, b.error || (b.detail && b.detail.verdict !== "passed" ? `${b.detail.stage}: ${b.detail.verdict} (${b.detail.categories.join(", ")})` : "")),
            ),
          ),
        ),
      ),
    );
  }

  async function responseView(id, params) {
    const data = await api(`/responses/${encodeURIComponent(id)}`, { tenant: params.get("tenant") });
    const r = data.response;
    const sum = data.summary || {};
    const threadId = sum.thread_id;
    const facts = [
      ["status", statusBadge(r.status)],
      ["model", r.model],
      me.admin ? ["tenant", data.tenant === "" ? '""' : data.tenant] : null,
      ["created", when(r.created_at)],
      ["duration", secs(sum.e2e_s)],
      ["TTFT", secs(sum.ttft_s)],
      ["tokens in / out", r.usage ? `${r.usage.input_tokens} / ${r.usage.output_tokens}` : "–"],
      threadId ? [r.conversation ? "conversation" : "thread", link(threadHash(threadId, data.tenant), r.conversation ? r.conversation.id : `${threadId} (its previous_response_id chain)`)] : null,
      r.previous_response_id ? ["previous", link(responseHash(r.previous_response_id, data.tenant), r.previous_response_id)] : null,
      r.error ? ["error", h("span", { class: "error" }, `${r.error.code}: ${r.error.message}`)] : null,
    ].filter(Boolean);
    const critical = data.timeline.filter((b) => b.critical);
    return h(
      "div",
      {},
      h("h1", {}, "Response ", h("span", { class: "mono" }, r.id)),
      h("div", { class: "card" }, h("table", {}, h("tbody", {}, facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))))),
      h("h2", {}, "Step timeline ", h("span", { class: "muted" }, `${data.timeline.length} steps; critical path ${critical.length} steps, ${secs(critical.reduce((t, b) => t + b.end_s - b.start_s, 0))} of work`)),
      h("div", { class: "card" }, gantt(data.timeline), data.timeline.length ? stepsTable(data.timeline) : null),
      h(
        "div",
        { class: "cols" },
        h("div", {}, h("h2", {}, "Input"), data.input_items.map(itemView), data.more_input_items ? h("p", { class: "muted" }, "(more input items not shown)") : null),
        h("div", {}, h("h2", {}, "Output"), (r.output || []).map(itemView)),
      ),
      h("details", {}, h("summary", { class: "muted" }, "The Response as JSON"), h("pre", {}, JSON.stringify(r, null, 2))),
    );
  }

  // -- a conversation -----------------------------------------------------------------------

  async function threadView(id, params) {
    const data = await api(`/threads/${encodeURIComponent(id)}`, { tenant: params.get("tenant") });
    const title = id.startsWith("conv") ? "Conversation " : "Thread (a previous_response_id chain) ";
    return h(
      "div",
      {},
      h("h1", {}, title, h("span", { class: "mono" }, id), h("span", { class: "muted" }, ` · ${data.turns.length} turns`)),
      data.turns.map((turn, i) =>
        h(
          "div",
          { class: "card turn" },
          h(
            "div",
            {},
            h("b", {}, `Turn ${i + 1}`), " · ", link(responseHash(turn.summary.id, data.tenant), turn.summary.id), " · ",
            statusBadge(turn.summary.status), ` · ${turn.summary.model || ""} · ${when(turn.summary.created_at)} · ${secs(turn.summary.e2e_s)}`,
          ),
          h("div", { class: "cols" }, h("div", {}, turn.input_items.map(itemView)), h("div", {}, turn.output_items.map(itemView))),
        ),
      ),
    );
  }

  // -- agent sessions: a session's turns, responses, steps and subagents on one timeline ------

  async function sessionsView(params) {
    const tenant = params.get("tenant");
    const page = await api("/sessions", { tenant, limit: 50 });
    const body = h("tbody");
    const addRows = (rows) => {
      for (const r of rows) {
        body.append(
          h(
            "tr",
            { class: "row", onclick: () => (location.hash = sessionHash(r.id, page.tenant)) },
            h("td", {}, when(r.created_at)),
            h("td", { class: "mono" }, link(sessionHash(r.id, page.tenant), r.id)),
            h("td", {}, r.model || "–"),
            h("td", {}, statusBadge(r.status)),
            h("td", {}, r.multi_agent ? "yes" : ""),
            h("td", {}, when(r.last_active_at)),
          ),
        );
      }
    };
    addRows(page.data);
    let last = page.last_id;
    const more = h("button", { type: "button", hidden: !page.has_more }, "Older sessions");
    more.addEventListener("click", async () => {
      const next = await api("/sessions", { tenant, limit: 50, after: last });
      addRows(next.data);
      last = next.last_id;
      more.hidden = !next.has_more;
    });
    const head = h("thead", {}, h("tr", {}, ["Created", "Session", "Model", "Status", "Subagents", "Last active"].map((c) => h("th", {}, c))));
    return h(
      "div",
      {},
      h("h1", {}, "Agent sessions", me.admin ? h("span", { class: "muted" }, ` · tenant ${page.tenant === "" ? '""' : page.tenant}`) : null),
      page.data.length ? h("table", { id: "sessions" }, head, body) : h("p", { class: "muted" }, "No session."),
      h("p", {}, more),
    );
  }

  // The session's traces as one nested Gantt chart: a row per span (turn, response, model or
  // tool call), indented by depth; a subagent's turn sits under the call that made it. Each
  // bar carries its times and its place in the tree as data attributes.
  function spanGantt(rows) {
    if (!rows.length) return h("p", { class: "muted" }, "No trace yet: the session has no turn.");
    const width = 1000, labels = 260, rowH = 22, top = 24;
    const { chart, x } = timeAxis(rows, { id: "session-timeline", label: "Session timeline", width, labels, rowH, top });
    rows.forEach((r, row) => {
      const y = top + row * rowH;
      if (r.kind === "turn") chart.append(s("rect", { class: "band", x: 0, y, width, height: rowH }));
      const label = r.kind === "turn" && r.attributes["troupe.subagent.id"] ? `subagent ${r.attributes["troupe.subagent.id"]}` : r.kind === "turn" ? `turn ${r.attributes["troupe.turn.id"]}` : r.name;
      chart.append(s("text", { x: 6 + r.depth * 12, y: y + rowH / 2 + 4 }, label.length > 34 ? label.slice(0, 33) + "…" : label));
      const left = x(r.start_s);
      const barWidth = Math.max(2, x(r.end_s) - left);
      const details = [r.name, `start +${secs(r.start_s)}, ${secs(r.end_s - r.start_s)}`];
      for (const [key, value] of Object.entries(r.attributes)) details.push(`${key}: ${value}`);
      if (r.error) details.push(`error: ${r.error}`);
      chart.append(
        s(
          "rect",
          {
            class: ["span", r.kind, r.error ? "failed" : ""].filter(Boolean).join(" "), x: left, y: y + 4, width: barWidth, height: rowH - 8, rx: 2,
            "data-kind": r.kind, "data-name": r.name, "data-depth": r.depth, "data-span": r.span_id, "data-parent": r.parent_id || "",
            "data-start": r.start_s, "data-end": r.end_s,
          },
          s("title", {}, details.join("\n")),
        ),
      );
      chart.append(s("text", { class: "tick", x: left + barWidth + 4, y: y + rowH / 2 + 4 }, secs(r.end_s - r.start_s)));
    });
    const legend = h(
      "div",
      { class: "legend" },
      h("span", {}, h("i", { style: "background:var(--turn)" }), "turn"),
      h("span", {}, h("i", { style: "background:var(--response)" }), "response"),
      h("span", {}, h("i", { style: "background:var(--model)" }), "model call"),
      h("span", {}, h("i", { style: "background:var(--tool)" }), "tool call"),
      h("span", {}, h("i", { style: "background:var(--guardrail)" }), "guardrail check"),
      h("span", {}, h("i", { style: "background:var(--error)" }), "failed"),
    );
    return h("div", {}, legend, chart);
  }

  async function sessionView(id, params) {
    const data = await api(`/sessions/${encodeURIComponent(id)}`, { tenant: params.get("tenant") });
    const sess = data.session;
    const responses = data.rows.filter((r) => r.kind === "response");
    const facts = [
      ["status", statusBadge(sess.status)],
      ["model", sess.agent.model],
      me.admin ? ["tenant", data.tenant === "" ? '""' : data.tenant] : null,
      ["created", when(sess.created_at)],
      ["turns", `${data.turns.length}${data.more_turns ? "+ (the first shown)" : ""}`],
      ["subagents", data.subagents.length ? data.subagents.map((a) => `${a.id} (${a.status})`).join(", ") : "none"],
    ].filter(Boolean);
    return h(
      "div",
      {},
      h("h1", {}, "Session ", h("span", { class: "mono" }, sess.id)),
      h("div", { class: "card" }, h("table", {}, h("tbody", {}, facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))))),
      h("h2", {}, "Timeline ", h("span", { class: "muted" }, `${count(data.turns.length, "turn")}, ${count(responses.length, "response")}, ${count(data.subagents.length, "subagent")}, from the session's traces (GET /v1/agents/sessions/{id}/traces)`)),
      h("div", { class: "card" }, spanGantt(data.rows)),
      h("h2", {}, "Responses"),
      h("ul", {}, responses.map((r) => h("li", {}, link(responseHash(r.attributes["gen_ai.response.id"], data.tenant), r.attributes["gen_ai.response.id"]), ` · ${r.attributes["troupe.status"]} · ${secs(r.end_s - r.start_s)}`))),
    );
  }

  // -- evaluation runs ----------------------------------------------------------------------

  function rateBar(rate, cls) {
    return h("span", { class: "rate" }, h("span", { class: "track" }, h("div", { class: `bar ${cls || ""}`, style: `width:${Math.round(100 * (rate || 0))}%` })), pct(rate));
  }

  async function evalsView() {
    const { data } = await api("/evals");
    const chosen = new Set();
    const button = h("button", { type: "button", disabled: true }, "Compare the two chosen runs");
    button.addEventListener("click", () => {
      const [a, b] = [...chosen];
      location.hash = hashOf("/evals/compare", { a, b });
    });
    const rows = data.map((run) => {
      const box = h("input", { type: "checkbox" });
      box.addEventListener("change", () => {
        if (box.checked) chosen.add(run.run_id);
        else chosen.delete(run.run_id);
        button.disabled = chosen.size !== 2;
      });
      return h(
        "tr",
        {},
        h("td", {}, box), h("td", { class: "mono" }, link(hashOf(`/evals/${encodeURIComponent(run.run_id)}`), run.run_id)),
        h("td", {}, when(run.created_at)), h("td", {}, run.dataset), h("td", {}, run.model || "(per case)"),
        h("td", { class: "num" }, run.cases), h("td", { class: "num" }, run.samples), h("td", {}, run.status),
      );
    });
    return h(
      "div",
      {},
      h("h1", {}, "Evaluation runs"),
      data.length
        ? [h("table", {}, h("thead", {}, h("tr", {}, ["", "run", "created", "dataset", "model", "cases", "samples", "status"].map((c) => h("th", {}, c)))), h("tbody", {}, rows)), h("p", {}, button)]
        : h("p", { class: "muted" }, "No evaluation run is stored (troupe eval run … stores them)."),
    );
  }

  async function evalView(runId) {
    const { run, summary } = await api(`/evals/${encodeURIComponent(runId)}`);
    return h(
      "div",
      {},
      h("h1", {}, "Evaluation run ", h("span", { class: "mono" }, run.run_id)),
      h("div", { class: "card" }, `${run.dataset} · ${run.model || "model per case"} · ${summary.cases} cases × ${summary.samples} samples · ${run.status} · started ${when(run.created_at)}`),
      h("div", { class: "metrics" },
        h("div", { class: "metric" }, h("div", { class: "value" }, pct(summary.success_rate)), h("div", { class: "label" }, `passed ${summary.passed} of ${summary.results}`)),
        summary.pass_k.map((p) => h("div", { class: "metric" }, h("div", { class: "value" }, pct(p.pass_at_k)), h("div", { class: "label" }, `pass@${p.k} (pass^${p.k} ${pct(p.pass_hat_k)})`))),
        h("div", { class: "metric" }, h("div", { class: "value" }, String(summary.errors)), h("div", { class: "label" }, "errors")),
        h("div", { class: "metric" }, h("div", { class: "value" }, secs(summary.latency.e2e_s.p50)), h("div", { class: "label" }, "end to end p50")),
      ),
      h("h2", {}, "Pass rate per tag"),
      h("table", { id: "tags" }, h("thead", {}, h("tr", {}, h("th", {}, "tag"), h("th", { class: "num" }, "results"), h("th", { class: "num" }, "passed"), h("th", {}, "rate"))),
        h("tbody", {}, summary.by_tag.map((t) => h("tr", {}, h("td", {}, t.tag), h("td", { class: "num" }, t.results), h("td", { class: "num" }, t.passed), h("td", {}, rateBar(t.rate)))))),
    );
  }

  async function compareView(params) {
    const data = await api("/evals/compare", { a: params.get("a"), b: params.get("b") });
    const showAll = params.get("all") === "1";
    const delta = (x, y) => (x === null || y === null || x === undefined || y === undefined ? "–" : `${(100 * (y - x)).toFixed(1)} pt`.replace(/^(?!-)/, "+"));
    const changed = data.cases.filter((c) => showAll || c.change !== "same");
    const passes = (x) => (x ? `${x.passed}/${x.samples}` : "–");
    const rate = (tag) => (tag ? tag.rate : null);
    return h(
      "div",
      {},
      h("h1", {}, "A = ", h("span", { class: "mono" }, data.a.run.run_id), " · B = ", h("span", { class: "mono" }, data.b.run.run_id)),
      h("table", { class: "card" }, h("thead", {}, h("tr", {}, ["", "A", "B", "B − A"].map((c) => h("th", {}, c)))),
        h("tbody", {},
          h("tr", {}, h("td", {}, "success rate"), h("td", {}, pct(data.a.summary.success_rate)), h("td", {}, pct(data.b.summary.success_rate)), h("td", {}, delta(data.a.summary.success_rate, data.b.summary.success_rate))),
          h("tr", {}, h("td", {}, "results"), h("td", {}, data.a.summary.results), h("td", {}, data.b.summary.results), h("td", {}, data.b.summary.results - data.a.summary.results)),
          h("tr", {}, h("td", {}, "errors"), h("td", {}, data.a.summary.errors), h("td", {}, data.b.summary.errors), h("td", {}, data.b.summary.errors - data.a.summary.errors)),
        )),
      h("h2", {}, "Pass rate per tag"),
      h("table", { id: "compare-tags" }, h("thead", {}, h("tr", {}, ["tag", "A", "B", "B − A"].map((c) => h("th", {}, c)))),
        h("tbody", {}, data.tags.map((t) => h("tr", {}, h("td", {}, t.tag), h("td", {}, rateBar(rate(t.a), "b")), h("td", {}, rateBar(rate(t.b))), h("td", {}, delta(rate(t.a), rate(t.b))))))),
      h("h2", {}, showAll ? "Every case" : "Cases that changed ", link(hashOf("/evals/compare", { a: params.get("a"), b: params.get("b"), all: showAll ? "" : "1" }), showAll ? "(only the changes)" : "(show all)")),
      changed.length
        ? h("table", {}, h("thead", {}, h("tr", {}, ["case", "A passed", "B passed", "change", "A e2e", "B e2e"].map((c) => h("th", {}, c)))),
            h("tbody", {}, changed.map((c) => h("tr", {}, h("td", { class: "mono" }, c.case_id), h("td", {}, passes(c.a)), h("td", {}, passes(c.b)), h("td", {}, c.change), h("td", {}, secs(c.a_e2e_s)), h("td", {}, secs(c.b_e2e_s))))))
        : h("p", { class: "muted" }, "No case changed."),
    );
  }

  // -- webhook endpoints and their delivery logs ----------------------------------------------

  // Read through the API itself (GET /v1/webhook_endpoints, …/{id}/deliveries), which answers for
  // the key's own tenant only: an admin key is tenant "" there while tenants have no keys, and
  // no tenant (a 401) once they have, so the views then ask for a tenant's key instead.
  const quoted = (tenant) => (tenant === "" ? '""' : tenant);

  function webhooksScope() {
    if (me.admin && me.keys) {
      return h(
        "p",
        { class: "muted", id: "webhooks-scope" },
        "Webhook endpoints belong to a tenant, and the webhook API (GET /v1/webhook_endpoints) shows the key's own tenant's only: " +
          "an admin key has no tenant. Forget this key and enter a tenant's key to see its endpoints and their deliveries.",
      );
    }
    const why = me.admin ? " (the webhook API shows the key's own tenant only: an admin key's is \"\", not every tenant)" : "";
    return h("p", { class: "muted", id: "webhooks-scope" }, `Tenant ${quoted(me.tenant)}${why}.`);
  }

  // Where a delivery stands: when it was delivered, when it is tried next, or when it gave up.
  function deliveryWhen(d) {
    if (d.status === "delivered") return `delivered ${when(d.delivered_at)}`;
    if (d.status === "pending") return d.next_attempt_at ? `next attempt ${when(d.next_attempt_at)}` : "next attempt –";
    return d.last_attempt_at ? `gave up ${when(d.last_attempt_at)}` : "–";
  }

  function deliveryRow(d) {
    return h(
      "tr",
      { "data-delivery": d.id, "data-endpoint": d.endpoint_id, "data-status": d.status },
      h("td", {}, when(d.created_at)),
      h("td", {}, d.event_type),
      h("td", { class: "mono" }, d.event_id),
      h("td", { class: "mono" }, d.id),
      h("td", {}, statusBadge(d.status)),
      h("td", { class: "num" }, String(d.attempts)),
      h("td", { class: "num" }, d.last_status_code ?? "–"),
      h("td", { class: "error" }, d.last_error || ""),
      h("td", {}, deliveryWhen(d), d.status === "pending" && d.last_attempt_at ? h("div", { class: "muted" }, `last attempt ${when(d.last_attempt_at)}`) : null),
    );
  }

  // An endpoint's delivery log, newest first. refresh() reads the newest page again: a delivery
  // already shown has its row replaced (it was retried), a new one goes on top; the button adds
  // the next older page.
  function deliveryLog(endpointId, limit) {
    const path = `/webhook_endpoints/${encodeURIComponent(endpointId)}/deliveries`;
    const rows = new Map(); // delivery id → its row
    const body = h("tbody");
    const head = h(
      "thead",
      {},
      h(
        "tr",
        {},
        h("th", {}, "Created"), h("th", {}, "Event type"), h("th", {}, "Event"), h("th", {}, "Delivery (webhook-id)"), h("th", {}, "Status"),
        h("th", { class: "num" }, "Attempts"), h("th", { class: "num" }, "Last status"), h("th", {}, "Last error"), h("th", {}, "Delivered / next attempt"),
      ),
    );
    const table = h("table", { class: "deliveries", "data-endpoint": endpointId, hidden: true }, head, body);
    const empty = h("p", { class: "muted" }, "No delivery yet: an event this endpoint subscribes to makes one.");
    const more = h("button", { type: "button", hidden: true }, "Older deliveries");
    let last = null; // the oldest delivery shown: the next older page starts after it
    const shown = () => {
      table.hidden = rows.size === 0;
      empty.hidden = rows.size > 0;
    };
    async function refresh(mine) {
      const page = await v1(path, { limit });
      if (mine !== generation) return;
      let next = body.firstChild; // the row after the last one placed
      for (const d of page.data) {
        const row = deliveryRow(d);
        const old = rows.get(d.id);
        if (old) {
          old.replaceWith(row);
          next = row.nextSibling;
        } else {
          body.insertBefore(row, next);
        }
        rows.set(d.id, row);
      }
      if (last === null) {
        last = page.last_id;
        more.hidden = !page.has_more;
      }
      shown();
    }
    more.addEventListener("click", async () => {
      const page = await v1(path, { limit, after: last });
      for (const d of page.data) {
        if (rows.has(d.id)) continue;
        const row = deliveryRow(d);
        body.append(row);
        rows.set(d.id, row);
      }
      last = page.last_id ?? last;
      more.hidden = !page.has_more;
      shown();
    });
    return { node: h("div", {}, table, empty, h("p", {}, more)), refresh };
  }

  // The logs read again every WEBHOOKS_EVERY_MS while the view is shown (route() stops it).
  function refreshEvery(logs, mine) {
    const note = h("p", { class: "muted", id: "webhooks-refreshed" }, `Refreshed every ${WEBHOOKS_EVERY_MS / 1000} s.`);
    if (mine === generation) {
      poller = setInterval(async () => {
        try {
          await Promise.all(logs.map((log) => log.refresh(mine)));
          if (mine === generation) note.replaceChildren(`Refreshed every ${WEBHOOKS_EVERY_MS / 1000} s; last at ${new Date().toLocaleTimeString()}.`);
        } catch (error) {
          if (!(error instanceof NeedsKey)) note.replaceChildren(h("span", { class: "error" }, error.message));
        }
      }, WEBHOOKS_EVERY_MS);
    }
    return note;
  }

  async function webhooksView(mine) {
    if (me.admin && me.keys) return h("div", {}, h("h1", {}, "Webhooks"), webhooksScope());
    const page = await v1("/webhook_endpoints", { limit: 100 });
    const logs = page.data.map((ep) => deliveryLog(ep.id, 10));
    await Promise.all(logs.map((log) => log.refresh(mine)));
    const head = h("thead", {}, h("tr", {}, ["Name", "URL", "Event types", "Signing secret", "Created"].map((c) => h("th", {}, c))));
    const body = h(
      "tbody",
      {},
      page.data.map((ep) =>
        h(
          "tr",
          { class: "row", "data-endpoint": ep.id, onclick: () => (location.hash = webhookHash(ep.id)) },
          h("td", {}, link(webhookHash(ep.id), ep.name || ep.id)),
          h("td", { class: "mono" }, ep.url),
          h("td", {}, ep.event_types.join(", ")),
          h("td", { class: "mono" }, ep.signing_secret_hint || "–"),
          h("td", {}, when(ep.created_at)),
        ),
      ),
    );
    return h(
      "div",
      {},
      h("h1", {}, "Webhook endpoints"),
      webhooksScope(),
      page.data.length
        ? h("table", { id: "webhook-endpoints" }, head, body)
        : h("p", { class: "muted" }, "No webhook endpoint (client.webhooks.create makes one: docs/webhooks.md)."),
      page.has_more ? h("p", { class: "muted" }, `The first ${page.data.length} endpoints are shown.`) : null,
      page.data.map((ep, i) =>
        h(
          "section",
          { class: "webhook" },
          h("h2", {}, "Deliveries to ", link(webhookHash(ep.id), ep.name || ep.id), h("span", { class: "muted" }, ` · ${ep.url} · the newest 10`)),
          logs[i].node,
        ),
      ),
      page.data.length ? refreshEvery(logs, mine) : null,
    );
  }

  async function webhookView(id, mine) {
    if (me.admin && me.keys) return h("div", {}, h("h1", {}, "Webhook endpoint ", h("span", { class: "mono" }, id)), webhooksScope());
    const ep = await v1(`/webhook_endpoints/${encodeURIComponent(id)}`);
    const log = deliveryLog(ep.id, 50);
    await log.refresh(mine);
    const facts = [
      ["name", ep.name],
      ["url", h("span", { class: "mono" }, ep.url)],
      ["event types", ep.event_types.join(", ")],
      ["signing secret", h("span", { class: "mono" }, ep.signing_secret_hint || "–")],
      ["tenant", quoted(me.tenant)],
      ["created", when(ep.created_at)],
      ["updated", when(ep.updated_at)],
    ];
    return h(
      "div",
      {},
      h("h1", {}, "Webhook endpoint ", h("span", { class: "mono" }, ep.id)),
      h("p", {}, link("#/webhooks", "← every endpoint")),
      h("div", { class: "card" }, h("table", {}, h("tbody", {}, facts.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))))),
      h("h2", {}, "Deliveries ", h("span", { class: "muted" }, "newest first (GET /v1/webhook_endpoints/{id}/deliveries)")),
      log.node,
      refreshEvery([log], mine),
    );
  }

  route();
})();
