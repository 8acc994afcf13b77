// Live sockets of the console: one kept-open WebSocket helper, the change watch, a serialiser.
import { get, listSocket } from "./api.js";

// A WebSocket kept open: address() gives { url, token } for each (re)connect; the auth frame
// goes first; onFrame gets every parsed frame; a close with a code in finalCodes ends it (its
// text goes to onState), any other close reconnects with backoff (0.5 s doubling to 4 s).
// Returns a stop function.
export function keepSocket({ address, onFrame, onState = () => {}, finalCodes = {} }) {
  const live = { socket: null, retry: 500, timer: null, alive: true };
  function connect() {
    if (!live.alive) return;
    const { url, token } = address();
    const socket = new WebSocket(url);
    live.socket = socket;
    socket.addEventListener("open", () => socket.send(JSON.stringify({ type: "auth", token })));
    socket.addEventListener("message", (msg) => {
      let frame;
      try { frame = JSON.parse(msg.data); } catch { return; }
      if (frame.type === "subscribed") {
        live.retry = 500;
        onState("live", "live");
      }
      onFrame(frame);
    });
    socket.addEventListener("close", (event) => {
      if (!live.alive || live.socket !== socket) return;
      if (finalCodes[event.code]) {
        onState("down", finalCodes[event.code]);
        // Refused as unauthorized: ask the server who we are; its 401 makes the page drop
        // the controls of an identity that is gone (api.js).
        if (event.code === 4401) get("/console/whoami").catch(() => null);
        return;
      }
      onState("down", "reconnecting…");
      live.timer = setTimeout(connect, live.retry);
      live.retry = Math.min(live.retry * 2, 4000);
    });
  }
  connect();
  return () => {
    live.alive = false;
    clearTimeout(live.timer);
    if (live.socket) live.socket.close(1000);
  };
}

// The server's conversation-change socket: onChange() after every (re)subscribe (whatever
// changed while it was down) and on every pushed "changed" frame.
export function watchChanges(onChange, onState = () => {}) {
  return keepSocket({
    address: () => listSocket(),
    onFrame: (frame) => {
      if (frame.type === "subscribed" || frame.type === "changed") onChange();
    },
    onState,
    finalCodes: { 4401: "Your session or key is no longer valid: sign in again." },
  });
}

// Wraps an async reader so that one read runs at a time; a call meanwhile asks for one more.
export function serialised(read) {
  let running = false;
  let again = false;
  return async function run() {
    if (running) {
      again = true;
      return;
    }
    running = true;
    try {
      await read();
    } finally {
      running = false;
    }
    if (again) {
      again = false;
      run();
    }
  };
}
