// The worktree's changes: changed files, the unified diff (coloured by line kind) and the
// commits on the conversation's branch.
import { get } from "./api.js";
import { h, clear } from "./dom.js";

export function showChanges(body, base) {
  let alive = true;
  const files = h("ul", { id: "changed-files", class: "files" });
  const diff = h("pre", { id: "diff", class: "diff" });
  const commits = h("ul", { id: "commits", class: "files" });
  clear(body).append(
    h("section", { class: "card" }, h("h2", {}, "Changed files"), files),
    h("section", { class: "card" }, h("h2", {}, "Commits"), commits),
    h("section", { class: "card" }, h("h2", {}, "Diff"), diff));

  async function load() {
    try {
      const [changes, text, log] = await Promise.all([
        get(`${base}/changes`), get(`${base}/diff`), get(`${base}/commits`)]);
      if (!alive) return;
      files.append(...changes.items.map((f) => h("li", { class: "mono" }, `${f.status || ""} ${f.path}`)));
      if (!changes.items.length) files.append(h("li", { class: "muted" }, "No changes."));
      commits.append(...log.items.map((c) => h("li", {}, h("span", { class: "mono" }, (c.sha || "").slice(0, 10)), ` ${c.subject || c.message || ""}`)));
      if (!log.items.length) commits.append(h("li", { class: "muted" }, "No commits yet."));
      for (const line of text.diff.split("\n")) {
        const kind = line.startsWith("+++") || line.startsWith("---") ? "file"
          : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "ctx";
        diff.append(h("span", { class: `d-${kind}` }, line), "\n");
      }
    } catch (err) {
      clear(files).append(h("li", { class: "error" }, err.message));
    }
  }
  load();
  return () => { alive = false; };
}
