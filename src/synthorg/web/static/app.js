// The console's entry: sign-in, the header, and a hash router over the views.
import { backends, current, loadSession, session, signIn, signOut, useBackend } from "./api.js";
import { h, clear, safeId, toast } from "./dom.js";
import { showList } from "./list.js";
import { showConversation } from "./conversation.js";
import { backendsListed, keyForm, renderBackends } from "./backends.js";

const main = document.getElementById("main");
let teardown = null;

function showSignIn(message) {
  const who = clear(document.getElementById("who"));
  who.append(h("span", { class: "muted" }, "not signed in"));
  const input = h("input", {
    id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true,
    spellcheck: "false",
  });
  const error = h("p", { id: "sign-in-error", class: "error", role: "alert" }, message || "");
  const form = h("form", { class: "card narrow", "aria-labelledby": "sign-in-title" },
    h("h1", { id: "sign-in-title" }, "Sign in"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h("p", { class: "muted small" },
      "The key is exchanged for a session cookie and is not kept by this page."),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value;
    input.value = "";
    try {
      await signIn(key);
      start();
    } catch (err) {
      clear(error).append(err.status === 401 ? "That key is not valid (or was revoked)." : err.message);
      input.focus();
    }
  });
  clear(main).append(form);
  input.focus();
}

function renderWho() {
  const who = clear(document.getElementById("who"));
  who.append(
    h("span", { id: "principal" }, session.principal),
    h("span", { class: "muted small" }, ` (${session.roles.join(", ")})`),
    h("button", { id: "sign-out", type: "button", onclick: doSignOut }, "Sign out"),
  );
}

async function doSignOut() {
  let failed = null;
  try {
    await signOut();
  } catch (err) {
    failed = err; // the remote keys are forgotten all the same
  }
  if (teardown) teardown();
  teardown = null;
  clear(document.getElementById("backends"));
  if (failed && failed.status !== 401) {
    toast(failed.message, "error");
    renderWho();
    rerender();
    return;
  }
  history.replaceState(null, "", "#/"); // the next person starts at the list, not our page
  showSignIn("Signed out.");
}

let routing = 0;

async function route() {
  if (teardown) teardown();
  teardown = null;
  const turn = ++routing;
  const hash = location.hash || "#/";
  const [where, query] = hash.split("?");
  const named = new URLSearchParams(query || "").get("b");
  if (named !== null) {
    await backendsListed();
    if (turn !== routing) return; // another route started meanwhile
    const backend = backends.find((b) => b.base === named);
    if (!backend) {
      clear(main).append(h("p", { class: "error" }, `${named} is not a server this console knows.`));
      return;
    }
    if (backend !== current) {
      if (backend.base && !backend.key) { // a reload forgot the key: ask, then open the page
        clear(main).append(keyForm(backend, rerender, hash));
        return;
      }
      useBackend(backend);
      renderBackends(rerender);
    }
  }
  const match = /^#\/c\/([^/]+)(?:\/(changes))?$/.exec(where);
  if (match && safeId(decodeURIComponent(match[1]))) {
    teardown = showConversation(main, decodeURIComponent(match[1]), match[2] || "events");
  } else {
    teardown = showList(main);
  }
}

export function rerender() {
  renderBackends(rerender);
  route();
}

async function start() {
  let signedIn;
  try {
    signedIn = await loadSession();
  } catch (err) {
    clear(main).append(h("p", { class: "error" }, `The server did not answer: ${err.message}`));
    return;
  }
  if (!signedIn) {
    showSignIn(session.foreign ? "This browser offered a session this page did not sign in " +
      "with (another site on this host may have set it); it was ended. Sign in." : "");
    return;
  }
  renderWho();
  rerender();
}

window.addEventListener("hashchange", () => session.principal && route());
// A 401 from this server: the session or its key is gone; from a remote: its key is gone.
// Either way no control of the old identity stays on screen.
window.addEventListener("synthorg:unauthorized", (event) => {
  if (teardown) teardown();
  teardown = null;
  const remote = event.detail.backend.base;
  if (remote) {
    useBackend(backends[0]);
    rerender();
    toast(`${remote} refused the key (revoked?): choose it again to enter a key.`, "error");
    return;
  }
  Object.assign(session, { principal: null, roles: [], projects: [], csrf: null });
  clear(document.getElementById("backends"));
  showSignIn("Your session or its key is no longer valid: sign in again.");
});
start();
