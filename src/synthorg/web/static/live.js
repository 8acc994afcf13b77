// The server's conversation-change socket: calls onChange() after every (re)subscribe and on
// every pushed "changed" frame; reconnects with backoff. Returns a stop function.
import { listSocket } from "./api.js";

const FINAL_CLOSE = { 4401: "Your session or key is no longer valid: sign in again." };

export function watchChanges(onChange, onState = () => {}) {
  const live = { socket: null, retry: 500, timer: null, alive: true };
  function connect() {
    if (!live.alive) return;
    const { url, token } = listSocket();
    const socket = new WebSocket(url);
    live.socket = socket;
    socket.addEventListener("open", () => socket.send(JSON.stringify({ type: "auth", token })));
    socket.addEventListener("message", (msg) => {
      let frame;
      try { frame = JSON.parse(msg.data); } catch { return; }
      if (frame.type === "subscribed") {
        live.retry = 500;
        onState("live", "live");
        onChange(); // whatever changed while the socket was down
      } else if (frame.type === "changed") {
        onChange();
      }
    });
    socket.addEventListener("close", (event) => {
      if (!live.alive || live.socket !== socket) return;
      if (FINAL_CLOSE[event.code]) {
        onState("down", FINAL_CLOSE[event.code]);
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
