// The delegation tree of one conversation: who delegated it, the runs it delegated (status,
// own and tree cost, links), and what a child waits for, decided by the child's id. Re-read
// when the server pushes a change (no polling). Shown only for conversations in a tree.
import { can, get, link, post } from "./api.js";
import { h, append, clear, usd, safeId, toast } from "./dom.js";
import { serialised, watchChanges } from "./live.js";
import { actionDetail } from "./action.js";
import { hiddenFlag } from "./reveal.js";

const STATUSES = ["created", "running", "paused", "waiting_confirmation", "finished", "failed",
  "cancelled", "error", "interrupted"];

export function showTree(card, id) {
  let alive = true;
  let stopWatching = null;
  const base = (cid) => `/api/conversations/${encodeURIComponent(cid)}`;

  async function decide(childId, accepted, rejected, errorLine) {
    try {
      await post(`${base(childId)}/confirmation`, { accepted, rejected });
      toast(`decision sent for ${childId}`);
    } catch (err) {
      errorLine.textContent = err.status === 409
        ? `Refused: the run has moved on, this decision is stale. (${err.message})` : err.message;
    }
  }

  function pendingOf(childId, p) {
    const actionId = safeId(p.action_id);
    const error = h("span", { class: "error", role: "alert" });
    const detail = actionDetail(p.tool_name, p.arguments, p.summary);
    return h("li", { class: "child-pending", "data-child-action": actionId || "" },
      h("span", {}, `${childId} waits for approval · risk ${p.risk} · `),
      hiddenFlag(detail.hidden), detail.el,
      can("approver") && actionId ? [
        h("button", { type: "button", class: "approve", onclick: () => decide(childId, [actionId], [], error) }, "Approve"),
        h("button", { type: "button", class: "reject", onclick: () => decide(childId, [], [actionId], error) }, "Reject"),
      ] : null,
      error);
  }

  async function node(n, depth) {
    const cid = safeId(n.id);
    const status = STATUSES.includes(n.status) ? n.status : "x";
    let pending = [];
    if (cid && n.status === "waiting_confirmation") {
      try {
        pending = (await get(`${base(cid)}/confirmation`)).pending;
      } catch {
        pending = [];
      }
    }
    const children = [];
    for (const child of n.children) children.push(await node(child, depth + 1));
    return h("li", { class: "child", "data-child": cid || "" },
      cid ? h("a", { href: link(`/c/${cid}`) }, n.title || cid) : "(bad id)",
      " ", h("span", { class: `status s-${status}` }, n.status),
      h("span", { class: "muted small" }, ` · ${n.loop_type} · own ${usd(n.cost_usd)} · tree ${usd(n.tree_cost_usd)}`),
      pending.length ? h("ul", { class: "pending-list" }, pending.map((p) => pendingOf(cid, p))) : null,
      children.length ? h("ul", {}, children) : null);
  }

  const load = serialised(async () => {
    let tree;
    try {
      tree = await get(`${base(id)}/tree`);
    } catch (err) {
      if (err.status !== 501) toast(`Could not load the delegation tree: ${err.message}`, "error");
      return;
    }
    if (!alive) return;
    const parent = safeId(tree.parent_id);
    if (!parent && !tree.children.length) {
      card.hidden = true;
      return;
    }
    const items = [];
    for (const child of tree.children) items.push(await node(child, 1));
    if (!alive) return;
    card.hidden = false;
    append(clear(card), [
      h("h2", { id: "tree-title" }, "Delegation"),
      parent ? h("p", { id: "tree-parent" }, "Delegated by ", h("a", { href: link(`/c/${parent}`) }, parent)) : null,
      tree.children.length ? h("p", { class: "muted small" },
        `${tree.children.length} sub-run(s) · own ${usd(tree.cost_usd)} · tree ${usd(tree.tree_cost_usd)}`) : null,
      tree.children.length ? h("ul", { id: "tree-children", class: "tree" }, items) : null]);
    watch();
  });

  // Re-read on every pushed change, once the conversation is in a tree or starts delegating.
  function watch() {
    if (!stopWatching && alive) stopWatching = watchChanges(load);
  }

  load();
  return {
    reload: load,
    watch,
    stop: () => {
      alive = false;
      if (stopWatching) stopWatching();
    },
  };
}
