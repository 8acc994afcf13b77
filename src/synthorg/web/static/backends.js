// Placeholder for the backend switcher: only the local server for now.
import { backends, current } from "./api.js";
import { h, clear } from "./dom.js";

export function renderBackends() {
  const nav = clear(document.getElementById("backends"));
  nav.append(h("span", { class: "muted small" }, current.name || backends[0].name));
}
