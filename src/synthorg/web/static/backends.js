// The backend switcher: this server, plus the servers [server] console_backends names (the
// CSP lets the page reach only those). A remote is used with an API key typed here and kept
// in this page's memory only; the remote must list this console's origin in cors_origins.
import { ApiError, backends, current, request, useBackend } from "./api.js";
import { h, append, clear, toast } from "./dom.js";

let loaded = false;

async function health(backend) {
  try {
    const res = await fetch(`${backend.base}/health`, { credentials: "omit", cache: "no-store" });
    return res.ok ? "ok" : `HTTP ${res.status}`;
  } catch {
    return "unreachable";
  }
}

let listing = null;

// Resolves once the servers [server] console_backends names are in ``backends`` (a reloaded
// remote page waits for it before it can name its server).
export function backendsListed() {
  return listing || Promise.resolve();
}

async function load(rerender) {
  loaded = true;
  listing = (async () => {
    try {
      const data = await request("GET", "/console/backends", undefined, backends[0]);
      for (const base of data.items) {
        if (!backends.some((b) => b.base === base)) backends.push({ id: base, name: base, base, key: null, roles: [] });
      }
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
    }
  })();
  await listing;
  for (const backend of backends) backend.health = await health(backend);
  renderBackends(rerender);
}

export function keyForm(backend, rerender, after = "#/") {
  const input = h("input", { id: "backend-key", type: "password", autocomplete: "off", required: true });
  const form = h("form", { id: "backend-key-form", class: "card narrow" },
    h("h1", {}, "Connect to ", backend.name),
    h("label", { for: "backend-key" }, `API key for ${backend.name}`), input,
    h("p", { class: "muted small" }, "Kept in this page's memory only; a reload forgets it."),
    h("button", { type: "submit", class: "primary" }, "Connect"),
    h("p", { class: "error", role: "alert", id: "backend-error" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value;
    input.value = "";
    try {
      const me = await request("GET", "/console/whoami", undefined, { ...backend, key });
      Object.assign(backend, { key, roles: me.roles, principal: me.principal });
      useBackend(backend);
      if (location.hash === after) rerender();
      else location.hash = after;
      renderBackends(rerender);
    } catch (err) {
      form.querySelector("#backend-error").textContent = err.message;
    }
  });
  return form;
}

export function renderBackends(rerender) {
  const nav = clear(document.getElementById("backends"));
  if (!loaded) load(rerender);
  const select = h("select", { id: "backend", "aria-label": "Backend" },
    backends.map((b) => h("option", { value: b.id, selected: b === current },
      `${b.name}${b.health ? ` (${b.health})` : ""}`)));
  select.addEventListener("change", () => {
    const backend = backends.find((b) => b.id === select.value);
    if (!backend) return;
    if (backend.base && !backend.key) {
      clear(document.getElementById("main")).append(keyForm(backend, rerender));
      document.getElementById("backend-key").focus();
      return;
    }
    useBackend(backend);
    toast(`using ${backend.name}`);
    location.hash = "#/";
    rerender();
  });
  append(nav, [h("label", { for: "backend", class: "sr-only" }, "Backend"), select,
    current.base ? h("span", { id: "backend-principal", class: "small" }, `as ${current.principal}`) : null]);
}
