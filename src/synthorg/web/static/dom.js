// Element builder: strings always become text nodes (never HTML), so whatever a model, a tool
// or a repository wrote is shown as text. Nothing in the console assigns innerHTML.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (name === "class") el.className = value;
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// Ids that go into a URL path or a hash route: the server's identifier alphabet only.
const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;
export function safeId(value) {
  return typeof value === "string" && ID.test(value) ? value : null;
}

export function toast(message, kind = "info") {
  const box = document.getElementById("toast");
  clear(box).append(h("div", { class: `toast ${kind}` }, message));
}

export function age(iso) {
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

export function usd(value) {
  const n = Number(value || 0);
  return `$${n.toFixed(n < 1 ? 4 : 2)}`;
}
