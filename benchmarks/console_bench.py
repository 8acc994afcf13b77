"""Web console benchmark, in a real Chromium (Debian's), against the API alone, in one run.

    uv run python benchmarks/console_bench.py [--streams 8] [--per-stream 60] [--events 10000]

1. Append → visible: ``--streams`` conversations receive events appended straight to the
   store at once (``--per-stream`` each, ~20/s per stream); each event carries its append
   time. ``--pages`` pages (one per conversation, each in its own window, default 8) record
   when the row is in the DOM and a frame has run (MutationObserver, then
   requestAnimationFrame). Baseline: a script subscribed to the same conversations over the
   WebSocket with a key, timing frame arrival. Overhead = console - script, per percentile.
2. A conversation of ``--events`` events (actions, observations, messages): time from
   navigation to the first row, and to the newest row (the page subscribes to the newest
   1,000 events and reads older ones on request); then scrolling the log for 3 s
   (one step per animation frame): frames per second and the longest frame, from rAF
   timestamps. Baseline: the same events fetched page by page by a script from the REST API.

3. A status change → visible in the conversation list (pushed on the list socket; the page
   re-reads its page then): ``--list-rounds`` transitions written to the store, timed to the
   row showing the new status. Baseline: a script on the list socket that re-reads the page
   by REST when told. (Before the push, the list re-read itself every 2 s: ~1 s on average.)

The app is the real one (create_app over boot(): SQLite store, run service, key file); no
run is started, events are appended the way a run appends them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import websockets

from synthorg.domain import ActionEvent, MessageEvent, ObservationEvent, TokenUsage
from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from synthorg.settings import Settings

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Eight pages watch at once: keep the background ones rendering as if each had its own
    # screen (Chromium otherwise pauses animation frames in hidden tabs).
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]
MARK = "bench-ns="
PUSH_GAP_S = 0.5
"""Between list rounds: longer than the server's 0.25 s coalescing of list pushes."""

OBSERVE = """
() => {
  window.__lat = [];
  const seen = new Set();
  new MutationObserver(() => {
    const appended = [];
    for (const el of document.querySelectorAll('#events .ev.msg .text')) {
      if (seen.has(el)) continue;
      seen.add(el);
      const m = /browser-bench-ns=(\\d+)/.exec(el.textContent);
      if (m) appended.push(Number(m[1]) / 1e6);
    }
    if (appended.length) requestAnimationFrame(() => {
      const now = performance.timeOrigin + performance.now();
      for (const t of appended) window.__lat.push(now - t);
    });
  }).observe(document.getElementById('events'), {childList: true, subtree: true});
}
"""

SCROLL = """
async () => {
  const box = document.getElementById('events');
  box.scrollTop = 0;
  const stamps = [];
  const end = performance.now() + 3000;
  await new Promise((resolve) => {
    const step = (t) => {
      stamps.push(t);
      box.scrollTop += 240;
      if (box.scrollTop + box.clientHeight >= box.scrollHeight) box.scrollTop = 0;
      if (t < end) requestAnimationFrame(step); else resolve();
    };
    requestAnimationFrame(step);
  });
  const gaps = stamps.slice(1).map((t, i) => t - stamps[i]);
  return {frames: gaps.length, ms: stamps[stamps.length - 1] - stamps[0],
          longest: Math.max(...gaps)};
}
"""


async def flip_status(store: Any, cid: str) -> str:
    """Move a conversation between created and paused (as a run's transition does)."""
    from synthorg.domain import ConversationStatus, StatusChangeEvent

    record = await store.get_conversation(cid)
    new = (
        ConversationStatus.PAUSED
        if record.status is ConversationStatus.CREATED
        else ConversationStatus.CREATED
    )
    changed = record.model_copy(update={"status": new})
    await store.transition(changed, StatusChangeEvent(old=record.status, new=new, reason="bench"))
    return new.value


async def list_push(
    page: Any, url: str, key: str, store: Any, cids: list[str], rounds: int
) -> tuple[list[float], list[float]]:
    """Status change -> visible: in the list page, and for a script on the list socket."""
    console: list[float] = []
    for i in range(rounds):
        cid = cids[i % len(cids)]
        await asyncio.sleep(PUSH_GAP_S)  # pacing: an isolated change, not a coalesced burst
        t0 = time.perf_counter()
        new = await flip_status(store, cid)
        await page.wait_for_selector(f"tr[data-id='{cid}'] .status:has-text('{new}')")
        console.append((time.perf_counter() - t0) * 1000)
    script: list[float] = []
    ws_url = url.replace("http", "ws") + "/api/conversations/ws"
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        websockets.connect(ws_url) as ws,
        httpx.AsyncClient(base_url=url, headers=headers) as client,
    ):
        await ws.send(json.dumps({"type": "auth", "token": key}))
        json.loads(await ws.recv())
        for i in range(rounds):
            cid = cids[i % len(cids)]
            await asyncio.sleep(PUSH_GAP_S)
            t0 = time.perf_counter()
            new = await flip_status(store, cid)
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] != "changed":
                    continue
                items = (await client.get("/api/conversations", params={"limit": 50})).json()
                if any(c["id"] == cid and c["status"] == new for c in items["items"]):
                    break
            script.append((time.perf_counter() - t0) * 1000)
    return console, script


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_repo(path: Path) -> None:
    path.mkdir(parents=True)
    env = {
        "GIT_AUTHOR_NAME": "b",
        "GIT_AUTHOR_EMAIL": "b@b",
        "GIT_COMMITTER_NAME": "b",
        "GIT_COMMITTER_EMAIL": "b@b",
        "PATH": "/usr/bin:/bin",
    }
    (path / "README.md").write_text("bench\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "i"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)


async def append_stream(store: Any, cid: str, count: int, gap_s: float, phase: str = "api") -> None:
    for i in range(count):
        text = f"line {i} {phase}{MARK}{time.time_ns()}"
        await store.append(cid, MessageEvent(role="assistant", text=text))
        await asyncio.sleep(gap_s)


async def api_latency(url: str, key: str, cids: list[str], store: Any, per: int) -> list[float]:
    """The baseline: a script on the WebSocket, timing each frame's arrival."""
    lat: list[float] = []
    ready = asyncio.Event()
    subscribed = 0

    async def follow(cid: str) -> None:
        nonlocal subscribed
        ws_url = url.replace("http", "ws") + f"/api/conversations/{cid}/events/ws?after=0"
        async with websockets.connect(ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"type": "auth", "token": key}))
            json.loads(await ws.recv())
            subscribed += 1
            if subscribed == len(cids):
                ready.set()
            got = 0
            while got < per:
                frame = json.loads(await ws.recv())
                text = frame.get("event", {}).get("text", "")
                if f"api{MARK}" in text:
                    lat.append(time.time_ns() / 1e6 - int(text.split(MARK)[1]) / 1e6)
                    got += 1

    followers = [asyncio.create_task(follow(c)) for c in cids]
    await asyncio.wait_for(ready.wait(), 60)
    await asyncio.gather(*(append_stream(store, c, per, 0.05) for c in cids))
    await asyncio.wait_for(asyncio.gather(*followers), 120)
    return lat


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--per-stream", type=int, default=60)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument(
        "--pages", type=int, default=8, help="browser pages watching (the first N streams)"
    )
    parser.add_argument("--list-rounds", type=int, default=20)
    opts = parser.parse_args()
    from playwright.async_api import async_playwright

    tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
    home = tmp / "home"
    repo = tmp / "repos" / "calc"
    make_repo(repo)
    settings = Settings(
        home=home,
        sections={"store": {"url": str(home / "store.db")}, "sandbox": {"backend": "bwrap"}},
    )
    keys = KeyStore(home / "server" / "keys.json")
    key = keys.create("bench", {Role.ADMIN})[1]
    server_settings = ServerSettings(repository_roots=(tmp / "repos",), keys_file=keys.path)
    async with boot(
        settings,
        registry=default_registry(),
        provisioner=default_provisioner,
        repositories=server_settings.repository_policy(settings),
    ) as parts:
        app = create_app(server_settings, store=parts.store, run_service=parts.service, auth=keys)
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="on",
            ws="websockets-sansio",
        )
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

            async def new_conversation(prompt: str) -> str:
                r = await client.post(
                    "/api/conversations",
                    json={"repository": str(repo), "prompt": prompt, "start": False},
                )
                cid: str = r.json()["id"]
                return cid

            cids = [await new_conversation(f"stream {i}") for i in range(opts.streams)]
            api = await api_latency(url, key, cids, parts.store, opts.per_stream)

            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                context = await browser.new_context(viewport={"width": 1440, "height": 900})
                context.set_default_timeout(120_000)
                page = await context.new_page()
                await page.goto(url + "/")
                await page.fill("#api-key", key)
                await page.click("form button[type=submit]")
                await page.wait_for_selector("#sign-out")
                pages = []
                cookies = await context.cookies()
                hidden = 0
                for cid in cids[: opts.pages]:
                    # One context (one window) per page: tabs behind another tab are hidden,
                    # and a hidden page gets no animation frames.
                    own = await browser.new_context(viewport={"width": 1440, "height": 900})
                    own.set_default_timeout(120_000)
                    await own.add_cookies(cookies)  # type: ignore[arg-type]
                    p = await own.new_page()
                    await p.goto(f"{url}/#/c/{cid}")
                    await p.wait_for_selector("#conn.live")
                    await p.evaluate(OBSERVE)
                    hidden += await p.evaluate("() => document.hidden ? 1 : 0")
                    pages.append(p)
                await asyncio.gather(
                    *(
                        append_stream(parts.store, c, opts.per_stream, 0.05, "browser-")
                        for c in cids
                    )
                )
                console: list[float] = []
                for p in pages:
                    await p.wait_for_function(f"() => window.__lat.length >= {opts.per_stream}")
                    console += await p.evaluate("() => window.__lat")
                    await p.close()
                await page.wait_for_selector("#list-live.live")
                list_console, list_script = await list_push(
                    page, url, key, parts.store, cids, opts.list_rounds
                )

                # A long conversation.
                big = await new_conversation("a long conversation")
                for i in range(opts.events // 3):
                    aid = f"act-{i}"
                    await parts.store.append(
                        big,
                        ActionEvent(
                            action_id=aid,
                            tool_name="terminal",
                            summary=f"$ pytest -q test_{i}.py",
                            arguments={"command": f"pytest -q test_{i}.py"},
                            usage=TokenUsage(tokens_in=900, tokens_out=40),
                        ),
                    )
                    await parts.store.append(
                        big,
                        ObservationEvent(
                            action_id=aid,
                            content="\x1b[32m.\x1b[0m" * 20 + f"\n{i} passed\n",
                            exit_code=0,
                        ),
                    )
                    await parts.store.append(
                        big, MessageEvent(role="assistant", text=f"step {i} done")
                    )
                last = (await client.get(f"/api/conversations/{big}/events?limit=1")).json()[
                    "last_seq"
                ]
                t0 = time.perf_counter()
                after: int | None = 0
                fetched = 0
                while after is not None:
                    body = (
                        await client.get(
                            f"/api/conversations/{big}/events",
                            params={"after": after, "limit": 500},
                        )
                    ).json()
                    fetched += len(body["items"])
                    after = body["next_after"]
                api_fetch_s = time.perf_counter() - t0

                t0 = time.perf_counter()
                await page.goto(f"{url}/#/c/{big}")
                await page.wait_for_selector("#events [data-seq]")
                first_row_s = time.perf_counter() - t0
                await page.wait_for_selector(f"#events [data-seq='{last}']", state="attached")
                all_rows_s = time.perf_counter() - t0
                rows = await page.evaluate("() => document.querySelectorAll('#events *').length")
                scroll = await page.evaluate(SCROLL)
                await browser.close()
        server.should_exit = True
        await asyncio.wait_for(task, 30)

    fps = scroll["frames"] / (scroll["ms"] / 1000)
    print(
        f"append -> visible, {opts.streams} streams x {opts.per_stream} events, "
        f"{opts.pages} page(s) watching ({hidden} hidden)"
    )
    for name, values in (("console (browser)", console), ("API script (WebSocket)", api)):
        print(
            f"  {name:24} p50 {pct(values, 0.5):7.1f} ms  p99 {pct(values, 0.99):7.1f} ms  "
            f"n={len(values)}"
        )
    print(
        f"  console overhead        p50 {pct(console, 0.5) - pct(api, 0.5):+7.1f} ms  "
        f"p99 {pct(console, 0.99) - pct(api, 0.99):+7.1f} ms"
    )
    print(
        f"{last} events: first row {first_row_s * 1000:.0f} ms, newest row "
        f"{all_rows_s * 1000:.0f} ms (the page loads the newest 1,000 events; older on "
        f"request); API script fetched all {fetched} in {api_fetch_s * 1000:.0f} ms"
    )
    print(f"DOM elements in the rendered log: {rows}")
    print(
        f"status change -> visible in the list, {opts.list_rounds} rounds "
        f"{PUSH_GAP_S} s apart (pushed)"
    )
    for name, values in (
        ("console (browser)", list_console),
        ("script (socket + REST)", list_script),
    ):
        print(
            f"  {name:24} p50 {pct(values, 0.5):7.1f} ms  p99 {pct(values, 0.99):7.1f} ms  "
            f"ratio p50 {pct(values, 0.5) / pct(list_script, 0.5):.2f}x"
        )
    print(
        f"scrolling: {fps:.1f} fps over {scroll['ms']:.0f} ms, longest frame "
        f"{scroll['longest']:.1f} ms; load average {Path('/proc/loadavg').read_text().split()[:3]}"
    )
    print(
        f"  (mean latency console {statistics.mean(console):.1f} ms, api "
        f"{statistics.mean(api):.1f} ms)"
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
