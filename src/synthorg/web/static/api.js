// The console's only door to a server. The local server: its session cookie (HttpOnly, sent
// by the browser) plus the per-session CSRF token on every mutating call. A remote backend:
// its API key as a Bearer header over CORS, held in this page's memory only (never stored).
export class ApiError extends Error {
  constructor(status, code, detail) {
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

export const session = { principal: null, roles: [], projects: [], csrf: null };

export const backends = [{ id: "local", name: "this server", base: "", key: null }];
export let current = backends[0];
export function useBackend(backend) {
  current = backend;
}

// A route of the current backend: a remote's conversation names its server in the URL, so a
// reload (or a shared link) opens it there, asking for that server's key first.
export function link(route) {
  return current.base ? `#${route}?b=${encodeURIComponent(current.base)}` : `#${route}`;
}

export function can(role) {
  const roles = current.base ? current.roles || [] : session.roles;
  return roles.includes("admin") || roles.includes(role);
}

export async function request(method, path, body, backend = current) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (backend.key) headers.Authorization = `Bearer ${backend.key}`;
  // On every call, reads too: the server refuses a cookie whose session is not the one this
  // page signed in with (a cookie tossed in by another port of this host).
  else if (session.csrf) headers["X-CSRF-Token"] = session.csrf;
  let response;
  try {
    response = await fetch(backend.base + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: backend.key ? "omit" : "same-origin",
      cache: "no-store",
      redirect: "error",
    });
  } catch (err) {
    throw new ApiError(0, "network", `cannot reach the server (${err.message})`);
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail : `HTTP ${response.status}`;
    if (response.status === 401 && !path.startsWith("/console/session")) {
      // The key (or this session's key) no longer works: a remote's is forgotten, so choosing
      // it asks for a key again; the page drops what only the signed-in may do.
      if (backend.base) Object.assign(backend, { key: null, roles: [], principal: null });
      window.dispatchEvent(new CustomEvent("synthorg:unauthorized", { detail: { backend, detail } }));
    }
    throw new ApiError(response.status, data && data.code, detail);
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body = {}) => request("POST", path, body);
export const del = (path) => request("DELETE", path);

// Which session this origin signed in with. Cookies ignore ports, so a page on another port
// of this host can set our cookie to a session of its own (cookie tossing); it cannot read or
// write this origin's storage. So the page adopts a cookie's session only when its token was
// stored here at sign-in. (Not the API key: the key is never stored.)
const BINDING = "synthorg.session";

export async function loadSession() {
  let found;
  try {
    found = await request("GET", "/console/session", undefined, backends[0]);
  } catch (err) {
    if (err.status === 401) return false;
    throw err;
  }
  if (localStorage.getItem(BINDING) !== found.csrf) {
    // Not ours: end it here (the cookie goes) and ask for a key.
    const headers = { "X-CSRF-Token": found.csrf };
    await fetch("/console/session", { method: "DELETE", headers, credentials: "same-origin" }).catch(() => null);
    session.foreign = true;
    return false;
  }
  Object.assign(session, found);
  return true;
}

export async function signIn(key) {
  const found = await request("POST", "/console/session", { key }, backends[0]);
  localStorage.setItem(BINDING, found.csrf);
  Object.assign(session, found, { foreign: false });
}

// Sign-out ends this person's use of the page: the local session and every remote key it
// holds (else the next person to sign in would act as the remote key's holder).
export async function signOut() {
  try {
    await request("DELETE", "/console/session", undefined, backends[0]);
  } finally {
    localStorage.removeItem(BINDING);
    forgetRemoteKeys();
    Object.assign(session, { principal: null, roles: [], projects: [], csrf: null });
  }
}

export function forgetRemoteKeys() {
  for (const backend of backends) {
    if (backend.base) Object.assign(backend, { key: null, roles: [], principal: null });
  }
  current = backends[0];
}

// The WebSocket URL of a conversation's events after a seq, and its auth token.
export function socketFor(conversationId, after, backend = current) {
  const path = `/api/conversations/${encodeURIComponent(conversationId)}/events/ws`;
  return socketAt(path, { after: String(after) }, backend);
}

// The conversation list's change socket ("changed" frames: re-read the page).
export function listSocket(backend = current) {
  return socketAt("/api/conversations/ws", {}, backend);
}

function socketAt(path, params, backend) {
  const url = new URL(path, backend.base || location.origin);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  for (const [name, value] of Object.entries(params)) url.searchParams.set(name, value);
  return { url: url.toString(), token: backend.key || session.csrf };
}
