// One conversation: its record, run control by role, the event stream (history, then the live
// tail by seq over the WebSocket; a reconnect resumes after the last seq rendered, so nothing
// is missed or shown twice), actions with their observations, inline confirmation.
import { can, del, get, link, post, socketFor } from "./api.js";
import { h, append, clear, usd, safeId, toast } from "./dom.js";
import { renderAnsi } from "./ansi.js";
import { actionDetail } from "./action.js";
import { reveal, hiddenFlag } from "./reveal.js";
import { showChanges } from "./changes.js";
import { showTree } from "./tree.js";
import { keepSocket } from "./live.js";

const LONG_CHARS = 1200;
const LONG_LINES = 16;
const MAX_ROWS = 300; // rows with DOM nodes while following the tail
const PAGE_ROWS = 200; // rows added by "Show earlier events"
const TAIL_EVENTS = 1000; // a long log opens at its newest events; older ones on request
const OLDER_PAGE = 500; // events read per "Load earlier events" (the API's page limit)
const FINAL_CLOSE = { 4401: "Your session or key is no longer valid: sign in again.",
  4404: "No such conversation.", 4410: "This conversation was deleted." };

export function showConversation(main, id, tab) {
  const base = `/api/conversations/${encodeURIComponent(id)}`;
  const view = { record: null, lastSeq: 0, stopSocket: null, alive: true,
    pending: new Map(), byAction: new Map(), entries: [], start: 0, end: 0, queue: [],
    scheduled: false, follow: true, input: -Infinity,
    floor: 0, decided: new Set() };

  const title = h("h1", { id: "conv-title", class: "task-title" }, id);
  const meta = h("p", { id: "conv-meta", class: "muted small" });
  const usage = h("p", { id: "usage", class: "small" });
  const forge = h("p", { id: "conv-forge", class: "small", hidden: true });
  const conn = h("span", { id: "conn", class: "conn", role: "status" }, "connecting");
  const controls = h("div", { id: "controls", class: "row controls" });
  // Focusable: a keyboard user must be able to scroll the log even when no row holds a control.
  const events = h("ol", { id: "events", class: "events", "aria-label": "Events", tabindex: "0" });
  const approveAll = h("button", { id: "approve-all", type: "button", hidden: true, onclick: () => decide([...view.pending.keys()], []) },
    "Approve all pending");
  const tabs = h("nav", { class: "tabs", "aria-label": "Conversation views" },
    h("a", { href: link(`/c/${id}`), "aria-current": tab === "events" ? "page" : null }, "Events"),
    h("a", { href: link(`/c/${id}/changes`), "aria-current": tab === "changes" ? "page" : null }, "Changes"));
  const body = h("div", { id: "conv-body" });

  const treeCard = h("section", { id: "tree", class: "card", hidden: true, "aria-labelledby": "tree-title" });
  clear(main).append(
    h("p", {}, h("a", { href: "#/" }, "← Conversations")),
    h("section", { class: "card", "aria-labelledby": "conv-title" }, title, meta, forge, usage, h("div", { class: "row" }, conn, approveAll), controls),
    treeCard, tabs, body);
  const tree = showTree(treeCard, id);

  // -- the record -------------------------------------------------------------------------
  let recordTimer = null;
  async function loadRecord() {
    try {
      view.record = await get(base);
    } catch (err) {
      toast(err.message, "error");
      return;
    }
    const r = view.record;
    clear(title).append(...reveal(r.task.prompt));
    meta.textContent = `${r.status} · loop ${r.loop_type} · model ${r.model} · ` +
      `branch ${r.workspace ? r.workspace.branch : "—"} · ${r.turns} turns · runs ${r.runs}`;
    // The record's totals move with each turn (the store adds the turn's figures as it logs
    // it), so this is the spend so far, against the budget.
    const u = r.usage;
    const budget = r.budget_usd !== null ? Number(r.budget_usd) : null;
    append(clear(usage), [`tokens in ${u.tokens_in} / out ${u.tokens_out} · cost ${usd(u.cost_usd)}` +
      (budget !== null ? ` of ${usd(budget)} budget (${budget > 0 ? Math.round(100 * Number(u.cost_usd) / budget) : 100}%)` : ""),
      budget !== null && budget > 0 ? h("meter", { id: "budget-meter", min: "0", max: String(budget),
        value: String(Math.min(Number(u.cost_usd), budget)), high: String(0.8 * budget), "aria-label": "spend against budget" }) : null]);
    renderControls();
    tree.reload();
    loadForge();
  }

  // The forge side (a webhook drove this run): the server sends a URL only once it checked it
  // is the forge's own page of that issue or pull request; titles are the forge's text.
  async function loadForge() {
    let f;
    try {
      f = await get(`${base}/forge`);
    } catch (err) {
      return; // an older server, or the forge side unreadable: the rest of the page stands
    }
    forge.hidden = !f;
    if (!f) return;
    const item = (id, label, it) => {
      const text = `${label} #${it.number}${it.title ? ` ${it.title}` : ""}`;
      return typeof it.url === "string" && it.url.startsWith("https://")
        ? h("a", { id, href: it.url, rel: "noopener noreferrer", target: "_blank" }, text)
        : h("span", { id }, text);
    };
    append(clear(forge), [`forge project ${f.project_id} · triggers ${f.triggers.join(", ") || "—"}`,
      f.issue ? [" · ", item("forge-issue", "issue", f.issue)] : null,
      f.pull ? [" · ", item("forge-pull", "pull request", f.pull)] : null]);
  }
  function recordSoon() {
    if (recordTimer) return;
    recordTimer = setTimeout(() => { recordTimer = null; if (view.alive) loadRecord(); }, 300);
  }

  let deleteArmed = false; // see the Delete button in renderControls
  function renderControls() {
    clear(controls);
    if (!can("operator")) return; // the server refuses these for viewers all the same
    const r = view.record;
    const active = r && (r.active || r.status === "running" || r.status === "waiting_confirmation");
    const button = (action, label, enabled) => h("button", {
      id: `ctl-${action}`, type: "button", disabled: !enabled,
      onclick: async () => {
        try {
          const res = await post(`${base}/${action}`);
          toast(`${label}: ${res.status}`);
        } catch (err) {
          toast(`${label} refused: ${err.message}`, "error");
        }
        recordSoon();
      } }, label);
    // Talking to the agent is the page's main input: a labelled box of its own under the
    // controls (Ctrl+Enter sends); a message to a stopped run starts it again.
    const text = h("textarea", { id: "steer", rows: 3,
      placeholder: "Tell the agent what to do next, or correct it while it runs (Ctrl+Enter sends)" });
    const send = h("form", { class: "steer", id: "steer-form" },
      h("label", { for: "steer", class: "steer-label" }, "Message the agent"), text,
      h("button", { type: "submit", id: "steer-send", class: "primary" }, "Send"));
    text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) send.requestSubmit();
    });
    send.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!text.value.trim()) return;
      try {
        const res = await post(`${base}/messages`, { text: text.value, run: true });
        text.value = "";
        toast(`message ${res.delivery}`);
      } catch (err) {
        toast(`message refused: ${err.message}`, "error");
      }
    });
    // Delete asks twice (the second click deletes); the server refuses it while running.
    // The armed state outlives a re-render (a usage or status update redraws these controls
    // between the user's two clicks: the confirm would else only arm it again).
    const remove = h("button", { id: "ctl-delete", type: "button", class: "danger" },
      deleteArmed ? "Confirm delete" : "Delete");
    remove.addEventListener("click", async () => {
      if (!deleteArmed) {
        deleteArmed = true;
        remove.textContent = "Confirm delete";
        return;
      }
      deleteArmed = false;
      remove.textContent = "Delete";
      try {
        await del(base);
        toast("conversation deleted");
        location.hash = "#/";
      } catch (err) {
        toast(`Delete refused: ${err.message}`, "error");
      }
    });
    controls.append(
      h("div", { class: "row" },
        button("pause", "Pause", active), button("interrupt", "Interrupt", active),
        button("resume", "Resume", !active), button("cancel", "Cancel", active), remove),
      send);
  }

  // -- confirmation -------------------------------------------------------------------------
  // view.pending: action id -> its pending box element (null while not on screen).
  async function decide(accepted, rejected) {
    if (!accepted.length && !rejected.length) return;
    try {
      await post(`${base}/confirmation`, { accepted, rejected });
    } catch (err) {
      const stale = err.status === 409;
      for (const actionId of [...accepted, ...rejected]) {
        const box = view.pending.get(actionId);
        if (box) box.querySelector(".decision-error").textContent = stale
          ? `Refused: the run has moved on, this decision is stale. (${err.message})` : err.message;
      }
      toast(stale ? "Decision refused: the run has moved on (stale)." : err.message, "error");
    }
  }

  // What the approver decides on is the action itself (its complete arguments), never only
  // its one-line summary.
  function pendingBox(p) {
    const actionId = safeId(p.action_id);
    const entry = actionId ? view.byAction.get(actionId) : null;
    const args = p.arguments && Object.keys(p.arguments).length ? p.arguments
      : entry ? entry.stored.event.arguments : null;
    const detail = actionDetail(p.tool_name, args, p.summary);
    const box = h("div", { class: `pending risk-${["low", "medium", "high"].includes(p.risk) ? p.risk : "unknown"}`,
      "data-pending": actionId || "" },
      h("strong", {}, "Waiting for approval · ", reveal(p.tool_name), ` · risk ${p.risk}`),
      hiddenFlag(detail.hidden), detail.el,
      can("approver") && actionId ? h("div", { class: "row" },
        h("button", { type: "button", class: "approve", onclick: () => decide([actionId], []) }, "Approve"),
        h("button", { type: "button", class: "reject", onclick: () => decide([], [actionId]) }, "Reject")) : null,
      h("p", { class: "decision-error error", role: "alert" }));
    if (actionId) view.pending.set(actionId, box);
    return box;
  }

  function decisionLine(d) {
    return h("p", { class: `decision ${d.verdict}`, "data-decision": d.id }, `${d.verdict} by ${d.approver}`);
  }

  function refreshApproveAll() {
    approveAll.hidden = !(can("approver") && view.pending.size > 0);
  }

  // -- the model ----------------------------------------------------------------------------
  // Every event goes into view.entries (top-level rows, seq order); an action's observation,
  // pending state and decisions live on its entry. Only a window of entries has DOM nodes:
  // the newest MAX_ROWS while following the tail, older ones a page at a time on request.
  function ingest(stored, older = false) {
    const ev = stored.event;
    if (ev.kind === "observation") {
      const entry = view.byAction.get(ev.action_id);
      if (entry) {
        entry.obs.push(stored);
        if (entry.slots) entry.slots.obs.append(observation(stored));
        return;
      }
    } else if (ev.kind === "confirmation_request") {
      for (const p of ev.pending) {
        const actionId = safeId(p.action_id);
        if (!actionId || (older && view.decided.has(actionId))) continue;
        const entry = view.byAction.get(actionId);
        view.pending.set(actionId, null);
        if (entry) {
          entry.pending.set(actionId, p);
          if (entry.slots) clear(entry.slots.pending).append(pendingBox(p));
        } else {
          view.entries.push(newEntry({ ...stored, orphan: p }));
        }
      }
      refreshApproveAll();
    } else if (ev.kind === "confirmation_decision") {
      for (const [ids, verdict] of [[ev.accepted, "approved"], [ev.rejected, "rejected"]]) {
        for (const actionId of ids) {
          view.decided.add(actionId);
          const box = view.pending.get(actionId);
          if (box) box.remove();
          view.pending.delete(actionId);
          const entry = view.byAction.get(actionId);
          if (!entry) continue;
          entry.pending.delete(actionId);
          const d = { id: actionId, verdict, approver: ev.approver };
          entry.decisions.push(d);
          if (entry.slots) entry.slots.decision.append(decisionLine(d));
        }
      }
      refreshApproveAll();
    } else if (ev.kind === "status_change" || ev.kind === "finished") {
      recordSoon();
    }
    if (ev.usage) recordSoon(); // a turn: the record's turns and spend moved
    const entry = newEntry(stored);
    if (ev.kind === "action" && ev.tool_name === "delegate") tree.watch();
    if (ev.kind === "action" && safeId(ev.action_id)) view.byAction.set(ev.action_id, entry);
    view.entries.push(entry);
  }

  function newEntry(stored) {
    return { stored, el: null, slots: null, obs: [], pending: new Map(), decisions: [] };
  }

  // -- rendering ----------------------------------------------------------------------------
  function row(stored, cls, ...children) {
    return h("li", { class: `ev ${cls}`, "data-seq": stored.seq }, ...children);
  }

  function output(text) {
    const shown = renderAnsi(text);
    const pre = h("pre", { class: "term" }, shown);
    // Text the output later overwrote or erased (cursor movement) stays one click away.
    const raw = shown.redrawn ? h("details", { class: "raw-output" },
      h("summary", { class: "small" }, "⚠ the output redrew itself (cursor movement): show it raw"),
      h("pre", { class: "arg" }, reveal(text))) : null;
    const lines = text.split("\n").length;
    if (text.length <= LONG_CHARS && lines <= LONG_LINES) return [pre, raw];
    return h("details", {}, h("summary", {}, `output: ${lines} lines, ${text.length} characters`), pre, raw);
  }

  function textBlock(text) {
    const parts = reveal(text);
    return [hiddenFlag(parts.hidden), h("div", { class: "text" }, parts)];
  }

  function usageLine(u) {
    if (!u) return null;
    return h("span", { class: "usage muted small" }, ` · ${u.tokens_in} in / ${u.tokens_out} out · ${usd(u.cost_usd)}`);
  }

  function stamp(stored) {
    return h("time", { class: "muted small", datetime: stored.timestamp }, `#${stored.seq} `);
  }

  function observation(stored) {
    const ev = stored.event;
    return h("div", { class: `obs ${ev.is_error ? "err" : ""}`, "data-seq": stored.seq }, stamp(stored),
      ev.exit_code !== null && ev.exit_code !== undefined ? h("span", { class: "small muted" }, `exit ${ev.exit_code}`) : null,
      output(ev.content));
  }

  function render(entry) {
    const stored = entry.stored;
    const ev = stored.event;
    const when = stamp(stored);
    if (stored.orphan) return row(stored, "pending-orphan", pendingBox(stored.orphan));
    switch (ev.kind) {
      case "message":
        return row(stored, `msg ${ev.role}`, when, h("strong", {}, ev.role), usageLine(ev.usage),
          textBlock(ev.text));
      case "action": {
        const detail = actionDetail(ev.tool_name, ev.arguments, ev.summary);
        entry.slots = { obs: h("div", { class: "obs-slot" }), pending: h("div", { class: "pending-slot" }),
          decision: h("div", { class: "decision-slot" }) };
        for (const p of entry.pending.values()) entry.slots.pending.append(pendingBox(p));
        for (const d of entry.decisions) entry.slots.decision.append(decisionLine(d));
        for (const o of entry.obs) entry.slots.obs.append(observation(o));
        return row(stored, "action", when, h("strong", { class: "tool" }, reveal(ev.tool_name)),
          h("span", { class: `risk risk-${ev.risk}` }, ` risk ${ev.risk}`), usageLine(ev.usage),
          ev.thought ? h("div", { class: "thought muted" }, reveal(ev.thought)) : null,
          hiddenFlag(detail.hidden), detail.el,
          entry.slots.pending, entry.slots.decision, entry.slots.obs);
      }
      case "observation":
        return row(stored, "observation", observation(stored));
      case "confirmation_request":
        return row(stored, "line muted", when, `${ev.pending.length} action(s) wait for a decision`);
      case "confirmation_decision":
        return row(stored, "line", when, `decision by ${ev.approver}: ${ev.accepted.length} approved, ${ev.rejected.length} rejected`,
          ev.reason ? ` (${ev.reason})` : "");
      case "status_change":
        return row(stored, "line status", when, `status ${ev.old || "—"} → ${ev.new}`, ev.reason ? ` · ${ev.reason}` : "");
      case "pause": case "interrupt": case "cancel":
        return row(stored, "line", when, `${ev.kind} requested by ${ev.requested_by || "—"}`);
      case "finished":
        return row(stored, "msg finished", when, h("strong", {}, "finished"), textBlock(ev.message));
      case "error":
        return row(stored, "msg error", when, h("strong", {}, `error ${ev.code}`), textBlock(ev.message));
      case "tool_audit":
        return row(stored, "line", when, `tool ${ev.tool}: ${ev.outcome}`, ev.detail ? ` · ${ev.detail}` : "");
      case "checkpoint":
        return row(stored, "line", when, `checkpoint ${ev.index}`);
      default:
        return row(stored, "line", when, String(ev.kind));
    }
  }

  function materialise(entry) {
    entry.el = render(entry);
    return entry.el;
  }

  function drop(entry) {
    if (entry.el) entry.el.remove();
    entry.el = null;
    entry.slots = null;
  }

  const earlier = h("li", { class: "earlier", hidden: true },
    h("button", { type: "button", id: "show-earlier", onclick: showEarlier }, "Show earlier events"));
  events.append(earlier);

  function refreshEarlier() {
    earlier.hidden = view.start === 0 && view.floor === 0;
    earlier.firstChild.textContent = view.start > 0
      ? `Show earlier events (${view.start} not shown)` : `Load earlier events (up to #${view.floor})`;
  }

  // The history older than the floor is read by REST a page at a time, on request, and put in
  // front of the model (ids decided later stay decided).
  async function loadOlder() {
    const from = Math.max(0, view.floor - OLDER_PAGE);
    let page;
    try {
      page = await get(`${base}/events?after=${from}&limit=${view.floor - from}`);
    } catch (err) {
      toast(`Could not load earlier events: ${err.message}`, "error");
      return;
    }
    const saved = view.entries;
    view.entries = [];
    for (const stored of page.items) if (stored.seq > from && stored.seq <= view.floor) ingest(stored, true);
    const chunk = view.entries;
    view.entries = chunk.concat(saved);
    view.start += chunk.length;
    view.end += chunk.length;
    view.floor = from;
  }

  async function showEarlier() {
    if (view.start === 0 && view.floor > 0) await loadOlder();
    const from = Math.max(0, view.start - PAGE_ROWS);
    const batch = document.createDocumentFragment();
    for (let i = from; i < view.start; i++) batch.append(materialise(view.entries[i]));
    const height = events.scrollHeight;
    earlier.after(batch);
    events.scrollTop += events.scrollHeight - height; // keep what was on screen in place
    view.start = from;
    refreshEarlier();
  }

  function flush() {
    view.scheduled = false;
    for (const stored of view.queue.splice(0)) ingest(stored);
    const total = view.entries.length;
    if (view.end >= total) return;
    const atBottom = view.follow;
    let from = view.end;
    if (atBottom && total - MAX_ROWS > view.start) {
      // Following the tail: keep at most MAX_ROWS rows, never build rows that would go at once.
      const start = total - MAX_ROWS;
      for (let i = view.start; i < Math.min(start, view.end); i++) drop(view.entries[i]);
      view.start = start;
      from = Math.max(view.end, start);
    }
    const batch = document.createDocumentFragment();
    for (let i = from; i < total; i++) batch.append(materialise(view.entries[i]));
    events.append(batch);
    view.end = total;
    refreshEarlier();
    if (atBottom) {
      events.scrollTop = events.scrollHeight;
    }
  }

  // Following the tail until the reader scrolls away from the bottom: only scrolling that
  // follows the reader's own input counts (rows settling to their real height move the
  // scroll position too, and must not stop the tail).
  for (const kind of ["wheel", "touchmove", "keydown", "pointerdown"]) {
    events.addEventListener(kind, () => { view.input = performance.now(); }, { passive: true });
  }
  events.addEventListener("scroll", () => {
    if (performance.now() - view.input > 1000) return;
    view.follow = events.scrollHeight - events.scrollTop - events.clientHeight < 80;
  });

  function receive(stored) {
    if (typeof stored.seq !== "number" || stored.seq <= view.lastSeq) return; // never twice
    view.lastSeq = stored.seq;
    view.queue.push(stored);
    if (!view.scheduled) {
      view.scheduled = true;
      requestAnimationFrame(flush);
    }
  }

  function connect() {
    if (!view.alive) return;
    view.stopSocket = keepSocket({
      address: () => socketFor(id, view.lastSeq), // resume after the last seq rendered
      onFrame: (frame) => { if (frame.type === "event") receive(frame); },
      onState: (kind, text) => {
        conn.textContent = text;
        conn.className = `conn ${kind}`;
      },
      finalCodes: FINAL_CLOSE,
    });
  }

  loadRecord();
  if (tab === "changes") {
    const stop = showChanges(body, base);
    conn.textContent = "";
    return () => { view.alive = false; stop(); tree.stop(); };
  }
  body.append(events);
  // Open a long log at its end: subscribe after (last seq - TAIL_EVENTS), older on request.
  get(`${base}/events?limit=1`).then((page) => {
    if (!view.alive) return;
    if (page.last_seq > TAIL_EVENTS && view.lastSeq === 0) {
      view.floor = view.lastSeq = page.last_seq - TAIL_EVENTS;
      refreshEarlier();
    }
    connect();
  }, () => connect());
  return () => {
    view.alive = false;
    tree.stop();
    clearTimeout(recordTimer);
    if (view.stopSocket) view.stopSocket();
  };
}
