// The worktree's changes: changed files, the unified diff (coloured by line kind) and the
// commits on the conversation's branch; the checkpoints, with rollback for operators.
import { can, get, post } from "./api.js";
import { h, clear, toast } from "./dom.js";
import { highlight } from "./highlight.js";
import { reveal, hasHidden, hiddenFlag } from "./reveal.js";

export function showChanges(body, base) {
  let alive = true;
  const files = h("ul", { id: "changed-files", class: "files" });
  const diff = h("pre", { id: "diff", class: "diff" });
  const commits = h("ul", { id: "commits", class: "files" });
  const checkpoints = h("ul", { id: "checkpoints", class: "files" });
  clear(body).append(
    h("section", { class: "card" }, h("h2", {}, "Changed files"), files),
    h("section", { class: "card" }, h("h2", {}, "Commits"), commits),
    h("section", { class: "card" }, h("h2", {}, "Checkpoints"), checkpoints),
    h("section", { class: "card" }, h("h2", {}, "Diff"), diff));

  // Operators only (the server refuses viewers all the same, and refuses while running).
  const rollback = (index) => h("button", {
    type: "button", class: "danger small", id: `rollback-${index}`,
    onclick: async () => {
      if (!confirm(`Roll the worktree back to checkpoint #${index}? Later edits are lost.`)) return;
      try {
        await post(`${base}/checkpoints/${index}/rollback`);
        toast(`rolled back to checkpoint #${index}`);
      } catch (err) {
        toast(`Roll back refused: ${err.message}`, "error");
        return;
      }
      if (alive) { clear(files); clear(diff); clear(commits); clear(checkpoints); load(); }
    } }, "Roll back");

  async function load() {
    try {
      const [changes, text, log, marks] = await Promise.all([
        get(`${base}/changes`), get(`${base}/diff`), get(`${base}/commits`),
        get(`${base}/events?kind=checkpoint&limit=500`)]);
      if (!alive) return;
      files.append(...changes.items.map((f) => h("li", { class: "mono" }, `${f.status || ""} `, reveal(f.path))));
      if (!changes.items.length) files.append(h("li", { class: "muted" }, "No changes."));
      commits.append(...log.items.map((c) => h("li", {}, h("span", { class: "mono" }, (c.sha || "").slice(0, 10)), ` ${c.subject || c.message || ""}`)));
      if (!log.items.length) commits.append(h("li", { class: "muted" }, "No commits yet."));
      checkpoints.append(...marks.items.map((m) => h("li", {},
        h("span", { class: "mono" }, `#${m.event.index}`), ` before action ${m.event.action_id || "—"} · ${m.timestamp} `,
        can("operator") && Number.isInteger(m.event.index) ? rollback(m.event.index) : false)));
      if (!marks.items.length) checkpoints.append(h("li", { class: "muted" }, "No checkpoints."));
      let hidden = 0;
      for (const line of text.diff.split("\n")) {
        const kind = line.startsWith("+++") || line.startsWith("---") ? "file"
          : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx";
        // A line holding a hidden character is shown revealed rather than highlighted.
        const revealed = hasHidden(line) ? reveal(line) : null;
        if (revealed) hidden += revealed.hidden;
        const body = revealed || (kind === "add" || kind === "del" || kind === "ctx"
          ? [line.slice(0, 1), highlight(line.slice(1))] : [line]);
        diff.append(h("span", { class: `d-${kind}` }, body), "\n");
      }
      const flag = hiddenFlag(hidden);
      if (flag) diff.before(flag);
    } catch (err) {
      clear(files).append(h("li", { class: "error" }, err.message));
    }
  }
  load();
  return () => { alive = false; };
}
