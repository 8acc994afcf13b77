// One conversation: its record, run control by role, the event stream (history, then the live
// tail by seq over the WebSocket; a reconnect resumes after the last seq rendered, so nothing
// is missed or shown twice), actions with their observations, inline confirmation.
import { can, get, post, socketFor } from "./api.js";
import { h, clear, usd, safeId, toast } from "./dom.js";
import { renderAnsi } from "./ansi.js";
import { showChanges } from "./changes.js";

const LONG_CHARS = 1200;
const LONG_LINES = 16;
const FINAL_CLOSE = { 4401: "Your session or key is no longer valid: sign in again.",
  4404: "No such conversation.", 4410: "This conversation was deleted." };

export function showConversation(main, id, tab) {
  const base = `/api/conversations/${encodeURIComponent(id)}`;
  const view = { record: null, lastSeq: 0, socket: null, alive: true, retry: 500, timer: null,
    pending: new Map(), actions: new Map(), queue: [], scheduled: false };

  const title = h("h1", { id: "conv-title", class: "task-title" }, id);
  const meta = h("p", { id: "conv-meta", class: "muted small" });
  const usage = h("p", { id: "usage", class: "small" });
  const conn = h("span", { id: "conn", class: "conn", role: "status" }, "connecting");
  const controls = h("div", { id: "controls", class: "row controls" });
  const events = h("ol", { id: "events", class: "events", "aria-label": "Events" });
  const approveAll = h("button", { id: "approve-all", type: "button", hidden: true, onclick: () => decide([...view.pending.keys()], []) },
    "Approve all pending");
  const tabs = h("nav", { class: "tabs", "aria-label": "Conversation views" },
    h("a", { href: `#/c/${id}`, "aria-current": tab === "events" ? "page" : null }, "Events"),
    h("a", { href: `#/c/${id}/changes`, "aria-current": tab === "changes" ? "page" : null }, "Changes"));
  const body = h("div", { id: "conv-body" });

  clear(main).append(
    h("p", {}, h("a", { href: "#/" }, "← Conversations")),
    h("section", { class: "card", "aria-labelledby": "conv-title" }, title, meta, usage, h("div", { class: "row" }, conn, approveAll), controls),
    tabs, body);

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
    title.textContent = r.task.prompt;
    meta.textContent = `${r.status} · loop ${r.loop_type} · model ${r.model} · ` +
      `branch ${r.workspace ? r.workspace.branch : "—"} · ${r.turns} turns · runs ${r.runs}`;
    const u = r.usage;
    usage.textContent = `tokens in ${u.tokens_in} / out ${u.tokens_out} · cost ${usd(u.cost_usd)}` +
      (r.budget_usd !== null ? ` of ${usd(r.budget_usd)} budget` : "");
    renderControls();
  }
  function recordSoon() {
    if (recordTimer) return;
    recordTimer = setTimeout(() => { recordTimer = null; if (view.alive) loadRecord(); }, 300);
  }

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
    const text = h("textarea", { id: "steer", rows: 1, placeholder: "message the agent" });
    const send = h("form", { class: "steer" }, h("label", { for: "steer", class: "sr-only" }, "Message"), text,
      h("button", { type: "submit", id: "steer-send" }, "Send"));
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
    controls.append(
      button("pause", "Pause", active), button("interrupt", "Interrupt", active),
      button("resume", "Resume", !active), button("cancel", "Cancel", active), send);
  }

  // -- confirmation -------------------------------------------------------------------------
  async function decide(accepted, rejected) {
    if (!accepted.length && !rejected.length) return;
    try {
      await post(`${base}/confirmation`, { accepted, rejected });
    } catch (err) {
      const stale = err.status === 409;
      for (const actionId of [...accepted, ...rejected]) {
        const slot = view.pending.get(actionId);
        if (slot) slot.querySelector(".decision-error").textContent = stale
          ? `Refused: the run has moved on, this decision is stale. (${err.message})` : err.message;
      }
      toast(stale ? "Decision refused: the run has moved on (stale)." : err.message, "error");
    }
  }

  function pendingBox(p) {
    const actionId = safeId(p.action_id);
    const box = h("div", { class: `pending risk-${["low", "medium", "high"].includes(p.risk) ? p.risk : "unknown"}`,
      "data-pending": actionId || "" },
      h("strong", {}, `Waiting for approval · risk ${p.risk}`),
      h("pre", { class: "cmd" }, p.summary || p.tool_name),
      can("approver") && actionId ? h("div", { class: "row" },
        h("button", { type: "button", class: "approve", onclick: () => decide([actionId], []) }, "Approve"),
        h("button", { type: "button", class: "reject", onclick: () => decide([], [actionId]) }, "Reject")) : null,
      h("p", { class: "decision-error error", role: "alert" }));
    return box;
  }

  function refreshApproveAll() {
    approveAll.hidden = !(can("approver") && view.pending.size > 0);
  }

  // -- events -------------------------------------------------------------------------------
  function row(stored, cls, ...children) {
    return h("li", { class: `ev ${cls}`, "data-seq": stored.seq }, ...children);
  }

  function output(text) {
    const pre = h("pre", { class: "term" }, renderAnsi(text));
    const lines = text.split("\n").length;
    if (text.length <= LONG_CHARS && lines <= LONG_LINES) return pre;
    return h("details", {}, h("summary", {}, `output: ${lines} lines, ${text.length} characters`), pre);
  }

  function usageLine(u) {
    if (!u) return null;
    return h("span", { class: "usage muted small" }, ` · ${u.tokens_in} in / ${u.tokens_out} out · ${usd(u.cost_usd)}`);
  }

  function render(stored) {
    const ev = stored.event;
    const when = h("time", { class: "muted small", datetime: stored.timestamp }, `#${stored.seq} `);
    switch (ev.kind) {
      case "message":
        return row(stored, `msg ${ev.role}`, when, h("strong", {}, ev.role), usageLine(ev.usage),
          h("div", { class: "text" }, ev.text));
      case "action": {
        const actionId = safeId(ev.action_id);
        const slots = { obs: h("div", { class: "obs-slot" }), pending: h("div", { class: "pending-slot" }),
          decision: h("div", { class: "decision-slot" }) };
        if (actionId) view.actions.set(actionId, slots);
        return row(stored, "action", when, h("strong", { class: "tool" }, ev.tool_name),
          h("span", { class: `risk risk-${ev.risk}` }, ` risk ${ev.risk}`), usageLine(ev.usage),
          ev.thought ? h("div", { class: "thought muted" }, ev.thought) : null,
          h("pre", { class: "cmd" }, ev.summary || JSON.stringify(ev.arguments, null, 2)),
          slots.pending, slots.decision, slots.obs);
      }
      case "observation": {
        const el = h("div", { class: `obs ${ev.is_error ? "err" : ""}`, "data-seq": stored.seq }, when,
          ev.exit_code !== null && ev.exit_code !== undefined ? h("span", { class: "small muted" }, `exit ${ev.exit_code}`) : null,
          output(ev.content));
        const slots = view.actions.get(ev.action_id);
        if (slots) { slots.obs.append(el); return null; }
        return row(stored, "observation", el);
      }
      case "confirmation_request": {
        for (const p of ev.pending) {
          const actionId = safeId(p.action_id);
          const slots = actionId && view.actions.get(actionId);
          const box = pendingBox(p);
          if (actionId) view.pending.set(actionId, box);
          if (slots) clear(slots.pending).append(box);
          else events.append(row(stored, "pending-orphan", box));
        }
        refreshApproveAll();
        return row(stored, "line muted", when, `${ev.pending.length} action(s) wait for a decision`);
      }
      case "confirmation_decision": {
        for (const [ids, verdict] of [[ev.accepted, "approved"], [ev.rejected, "rejected"]]) {
          for (const actionId of ids) {
            const box = view.pending.get(actionId);
            if (box) box.remove();
            view.pending.delete(actionId);
            const slots = view.actions.get(actionId);
            if (slots) slots.decision.append(h("p", { class: `decision ${verdict}`, "data-decision": actionId }, `${verdict} by ${ev.approver}`));
          }
        }
        refreshApproveAll();
        return row(stored, "line", when, `decision by ${ev.approver}: ${ev.accepted.length} approved, ${ev.rejected.length} rejected`,
          ev.reason ? ` (${ev.reason})` : "");
      }
      case "status_change":
        recordSoon();
        return row(stored, "line status", when, `status ${ev.old || "—"} → ${ev.new}`, ev.reason ? ` · ${ev.reason}` : "");
      case "pause": case "interrupt": case "cancel":
        return row(stored, "line", when, `${ev.kind} requested by ${ev.requested_by || "—"}`);
      case "finished":
        recordSoon();
        return row(stored, "msg finished", when, h("strong", {}, "finished"), h("div", { class: "text" }, ev.message));
      case "error":
        return row(stored, "msg error", when, h("strong", {}, `error ${ev.code}`), h("div", { class: "text" }, ev.message));
      case "tool_audit":
        return row(stored, "line", when, `tool ${ev.tool}: ${ev.outcome}`, ev.detail ? ` · ${ev.detail}` : "");
      case "checkpoint":
        return row(stored, "line", when, `checkpoint ${ev.index}`);
      default:
        return row(stored, "line", when, String(ev.kind));
    }
  }

  function flush() {
    view.scheduled = false;
    const atBottom = events.scrollHeight - events.scrollTop - events.clientHeight < 80;
    const batch = document.createDocumentFragment();
    for (const stored of view.queue.splice(0)) {
      const el = render(stored);
      if (el) batch.append(el);
    }
    events.append(batch);
    if (atBottom) events.scrollTop = events.scrollHeight;
  }

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
    const { url, token } = socketFor(id, view.lastSeq);
    const socket = new WebSocket(url);
    view.socket = socket;
    socket.addEventListener("open", () => socket.send(JSON.stringify({ type: "auth", token })));
    socket.addEventListener("message", (msg) => {
      let frame;
      try { frame = JSON.parse(msg.data); } catch { return; }
      if (frame.type === "subscribed") {
        view.retry = 500;
        conn.textContent = "live";
        conn.className = "conn live";
      } else if (frame.type === "event") {
        receive(frame);
      }
    });
    socket.addEventListener("close", (event) => {
      if (!view.alive || view.socket !== socket) return;
      if (FINAL_CLOSE[event.code]) {
        conn.textContent = FINAL_CLOSE[event.code];
        conn.className = "conn down";
        return;
      }
      conn.textContent = "reconnecting…";
      conn.className = "conn down";
      view.timer = setTimeout(connect, view.retry);
      view.retry = Math.min(view.retry * 2, 4000);
    });
  }

  loadRecord();
  if (tab === "changes") {
    const stop = showChanges(body, base);
    conn.textContent = "";
    return () => { view.alive = false; stop(); };
  }
  body.append(events);
  connect();
  return () => {
    view.alive = false;
    clearTimeout(view.timer);
    clearTimeout(recordTimer);
    if (view.socket) view.socket.close(1000);
  };
}
