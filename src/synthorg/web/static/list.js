// The conversations list: live (the server pushes "changed" on a WebSocket and the page is
// re-read then; no polling), filtered by status, project and forge trigger, searched by task
// text in the server's store, paged by the server's cursor; and the new-run form.
import { can, get, link, post } from "./api.js";
import { h, append, clear, age, usd, safeId, toast } from "./dom.js";
import { reveal } from "./reveal.js";
import { serialised, watchChanges } from "./live.js";

const STATUSES = ["created", "running", "paused", "waiting_confirmation", "finished", "failed",
  "cancelled", "error", "interrupted"];
const LOOPS = ["react", "plan_execute", "hybrid", "openhands"];
const POLICIES = ["never", "risky", "always"];
const TRIGGERS = [["label", "issue labelled"], ["comment", "issue comment"], ["ci", "failed CI"],
  ["review", "review"]];
const PAGE = 50;
const SEARCH_DELAY_MS = 250; // typing settles before the server is asked
const AGE_TICK_MS = 30000; // ages are re-rendered locally; nothing is fetched

export function showList(main) {
  const state = { status: "", search: "", project: "", trigger: "", cursors: [null], items: [],
    next: null, total: null };
  let searchTimer = null;
  let alive = true;

  const statusSelect = h("select", { id: "status-filter" },
    h("option", { value: "" }, "any status"), STATUSES.map((s) => h("option", { value: s }, s)));
  const search = h("input", { id: "task-search", type: "search", placeholder: "task text", maxlength: "200" });
  const projectInput = h("input", { id: "project-filter", type: "search", placeholder: "any project",
    maxlength: "200", pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]*" });
  const triggerSelect = h("select", { id: "trigger-filter" },
    h("option", { value: "" }, "any trigger"), TRIGGERS.map(([v, t]) => h("option", { value: v }, t)));
  const tbody = h("tbody", { id: "conversation-rows" });
  const pager = h("div", { class: "pager" });
  const count = h("span", { id: "conversation-count", class: "muted" });

  statusSelect.addEventListener("change", () => {
    state.status = statusSelect.value;
    state.cursors = [null];
    refresh();
  });
  triggerSelect.addEventListener("change", () => {
    state.trigger = triggerSelect.value;
    state.cursors = [null];
    refresh();
  });
  const typed = () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.search = search.value.trim();
      // A project the server would refuse (not an identifier) filters nothing until valid.
      state.project = projectInput.validity.valid ? projectInput.value.trim() : state.project;
      state.cursors = [null];
      refresh();
    }, SEARCH_DELAY_MS);
  };
  search.addEventListener("input", typed);
  projectInput.addEventListener("input", typed);

  append(clear(main), [
    can("operator") ? newRunForm() : null,
    h("section", { "aria-labelledby": "list-title" },
      h("div", { class: "row" },
        h("h1", { id: "list-title" }, "Conversations"), count),
      h("div", { class: "row filters" },
        h("label", { for: "status-filter" }, "Status"), statusSelect,
        h("label", { for: "task-search" }, "Search tasks"), search,
        h("label", { for: "project-filter" }, "Project"), projectInput,
        h("label", { for: "trigger-filter" }, "Trigger"), triggerSelect,
        h("span", { id: "list-live", class: "conn", role: "status" }, "connecting")),
      h("div", { class: "scroll-x" },
        h("table", { class: "list" },
          h("thead", {}, h("tr", {},
            ["Task", "Status", "Loop", "Model", "Branch", "Turns", "Cost", "Age"].map(
              (t) => h("th", { scope: "col" }, t)))),
          tbody)),
      pager)]);

  function render() {
    const rows = state.items;
    clear(tbody).append(...rows.map((c) => {
      const id = safeId(c.id);
      return h("tr", { "data-id": id || "" },
        h("td", { class: "task" },
          // A delegated run is marked as its parent's sub-run (the tree is on its page).
          safeId(c.parent_id) ? h("span", { class: "sub-run muted small" }, "↳ sub-run of ",
            h("a", { href: link(`/c/${safeId(c.parent_id)}`) }, safeId(c.parent_id)), " · ") : null,
          id ? h("a", { href: link(`/c/${id}`) }, reveal(c.task.prompt.slice(0, 140) || id)) : "(bad id)"),
        h("td", {}, h("span", { class: `status s-${STATUSES.includes(c.status) ? c.status : "x"}` }, c.status)),
        h("td", {}, c.loop_type),
        h("td", {}, c.model),
        h("td", { class: "mono small" }, c.workspace ? c.workspace.branch : ""),
        h("td", { class: "num" }, String(c.turns)),
        h("td", { class: "num" }, usd(c.usage.cost_usd)),
        h("td", { class: "num" }, age(c.created_at)));
    }));
    if (!rows.length) tbody.append(h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No conversations.")));
    const page = state.cursors.length;
    clear(pager).append(
      h("button", { type: "button", disabled: page === 1, onclick: () => { state.cursors.pop(); refresh(); } }, "Newer"),
      h("span", { class: "muted" }, ` page ${page} `),
      h("button", { type: "button", disabled: !state.next, onclick: () => { state.cursors.push(state.next); refresh(); } }, "Older"));
    count.textContent = state.total === null ? "" : `${state.total} total`;
  }

  // One read at a time; a change pushed meanwhile asks for one more read after it.
  const refresh = serialised(async () => {
    const filters = {};
    if (state.status) filters.status = state.status;
    if (state.search) filters.search = state.search;
    if (state.project) filters.project = state.project;
    if (state.trigger) filters.trigger = state.trigger;
    const params = new URLSearchParams({ ...filters, limit: String(PAGE) });
    const cursor = state.cursors[state.cursors.length - 1];
    if (cursor) params.set("cursor", cursor);
    try {
      const [page, total] = await Promise.all([
        get(`/api/conversations?${params}`),
        get(`/api/conversations/count?${new URLSearchParams(filters)}`),
      ]);
      if (!alive) return;
      state.items = page.items;
      state.next = page.next_cursor;
      state.total = total.count;
      render();
    } catch (err) {
      if (alive) toast(`Could not load conversations: ${err.message}`, "error");
    }
  });

  const liveState = document.getElementById("list-live");
  refresh();
  const stopWatching = watchChanges(refresh, (kind, text) => {
    liveState.textContent = text;
    liveState.className = `conn ${kind}`;
  });
  const ages = setInterval(() => alive && render(), AGE_TICK_MS);
  return () => {
    alive = false;
    stopWatching();
    clearTimeout(searchTimer);
    clearInterval(ages);
  };
}

function field(id, label, control) {
  control.id = id;
  control.name = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), control);
}

function newRunForm() {
  const repos = h("datalist", { id: "repo-list" });
  const repository = h("input", { list: "repo-list", required: true, placeholder: "/srv/repos/project", autocomplete: "off" });
  const task = h("textarea", { required: true, rows: 3 });
  const loop = h("select", {}, h("option", { value: "" }, "auto"), LOOPS.map((l) => h("option", { value: l }, l)));
  const model = h("input", { placeholder: "server default", autocomplete: "off" });
  const budget = h("input", { type: "number", min: "0", step: "0.01", placeholder: "server default" });
  const policy = h("select", {}, POLICIES.map((p) => h("option", { value: p }, p)));
  const error = h("p", { class: "error", role: "alert" });
  get("/console/repositories").then((data) => {
    clear(repos).append(...data.items.map((r) => h("option", { value: r })));
    if (data.items.length && !repository.value) repository.value = data.items[0];
  }).catch(() => {});
  const form = h("form", { id: "new-run", class: "card" },
    
    h("div", { class: "grid" },
      field("nr-repository", "Repository", repository), repos,
      field("nr-loop", "Loop", loop),
      field("nr-model", "Model", model),
      field("nr-budget", "Budget (USD)", budget),
      field("nr-policy", "Confirmation", policy)),
    field("nr-task", "Task", task),
    h("button", { type: "submit", class: "primary" }, "Start run"),
    error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clear(error);
    const body = { repository: repository.value.trim(), prompt: task.value, confirmation_policy: policy.value };
    if (loop.value) body.loop = loop.value;
    if (model.value.trim()) body.model = model.value.trim();
    if (budget.value) body.budget_usd = budget.value;
    try {
      const created = await post("/api/conversations", body);
      const id = safeId(created.id);
      if (id) location.hash = link(`/c/${id}`);
    } catch (err) {
      error.append(err.message);
    }
  });
  return h("details", { class: "new-run" }, h("summary", { id: "new-run-toggle" }, "New run"), form);
}
