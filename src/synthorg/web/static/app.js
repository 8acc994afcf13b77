// The console's entry: sign-in, the header, and a hash router over the views.
import { loadSession, session, signIn, signOut } from "./api.js";
import { h, clear, safeId, toast } from "./dom.js";
import { showList } from "./list.js";
import { showConversation } from "./conversation.js";
import { renderBackends } from "./backends.js";

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

function route() {
  if (teardown) teardown();
  teardown = null;
  const hash = location.hash || "#/";
  const match = /^#\/c\/([^/]+)(?:\/(changes))?$/.exec(hash);
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
start();
