// What an action will do, complete, for the person who approves it: the whole command, the
// whole content or change of an edit (folded when long, complete when opened), every other
// argument; invisible and control characters revealed and counted (reveal.js).
import { h } from "./dom.js";
import { reveal } from "./reveal.js";

const FOLD_LINES = 12;
const FOLD_CHARS = 800;

function counted(text, sink) {
  const parts = reveal(text);
  sink.hidden += parts.hidden;
  return parts;
}

function lines(text) {
  const s = String(text);
  return s.split("\n").length - (s.endsWith("\n") ? 1 : 0);
}

// A block of text, folded behind a summary that says how much it holds when it is long.
function fold(label, text, body) {
  const size = `${lines(text)} lines, ${String(text).length} characters`;
  const long = lines(text) > FOLD_LINES || String(text).length > FOLD_CHARS;
  return h("details", { class: "arg-fold", open: !long },
    h("summary", {}, `${label} (${size})`), body);
}

function changeLines(sign, text, sink) {
  return String(text).split("\n").map((line) =>
    h("span", { class: sign === "+" ? "d-add" : "d-del" }, sign, counted(line, sink), "\n"));
}

function valueText(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function editor(args, sink) {
  const head = `${args.command} ${args.path}` +
    (args.command === "insert" ? ` after line ${args.insert_line}` : "") +
    (Array.isArray(args.view_range) ? ` lines ${args.view_range.join("-")}` : "");
  const out = [h("pre", { class: "cmd" }, counted(head, sink))];
  if (typeof args.file_text === "string") {
    out.push(fold("content", args.file_text, h("pre", { class: "arg" }, counted(args.file_text, sink))));
  }
  if (typeof args.old_str === "string" || typeof args.new_str === "string") {
    const old = typeof args.old_str === "string" ? changeLines("-", args.old_str, sink) : [];
    const neu = typeof args.new_str === "string" ? changeLines("+", args.new_str, sink) : [];
    const all = `${args.old_str || ""}\n${args.new_str || ""}`;
    out.push(fold(args.command === "insert" ? "inserted text" : "change", all, h("pre", { class: "diff arg" }, old, neu)));
  }
  return out;
}

const SHOWN = { terminal: ["command"], file_editor: ["command", "path", "file_text", "old_str", "new_str", "insert_line", "view_range"] };

// { el, hidden }: the action's view and how many hidden characters it revealed.
export function actionDetail(toolName, args, summary) {
  const sink = { hidden: 0 };
  const box = h("div", { class: "action-detail" });
  if (!args || typeof args !== "object" || !Object.keys(args).length) {
    box.append(h("pre", { class: "cmd" }, counted(summary || toolName, sink)));
    return { el: box, hidden: sink.hidden };
  }
  if (toolName === "terminal" && typeof args.command === "string") {
    box.append(h("pre", { class: "cmd" }, "$ ", counted(args.command, sink)));
  } else if (toolName === "file_editor" && typeof args.command === "string") {
    box.append(...editor(args, sink));
  }
  // Every argument not shown above, whatever the tool: nothing it will receive is left out.
  const known = SHOWN[toolName] && box.childNodes.length ? SHOWN[toolName] : [];
  const rest = Object.keys(args).filter((k) => !known.includes(k));
  if (rest.length) {
    box.append(h("dl", { class: "args" }, rest.map((k) => [
      h("dt", {}, counted(k, sink)),
      h("dd", {}, fold(k, valueText(args[k]), h("pre", { class: "arg" }, counted(valueText(args[k]), sink))))])));
  }
  return { el: box, hidden: sink.hidden };
}
