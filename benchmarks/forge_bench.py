"""Forge webhooks: delivery accepted -> run started latency, and deliveries accepted per second
against a bare FastAPI endpoint doing only the signature check, in the same run.

    uv run python benchmarks/forge_bench.py [--deliveries 300] [--concurrency 8] [--runs 5]

Both apps run under uvicorn on loopback in this process, one after the other, fed by the same
httpx client. SynthOrg's endpoint is the real one (real stack over SQLite, the processor
draining in the background): each delivery is a `/synthorg` comment by an author the project
does not allow, so it is verified, classified, written durably, answered 202, then settled
REFUSED by the processor without starting a run (the time the processor takes to settle that
backlog after the last 202 is printed too). The peer verifies the same signature
(gidgethub, as ours does) and answers 202. Latency: labelled issues, one at a time, from the
202 to the delivery being settled STARTED (conversation created and its run started).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request, Response

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))  # the test harness's fixtures
sys.path.insert(0, str(_ROOT / "tests" / "server"))  # its scripted models (real_scripts:...)
from synthorg.forge.config import ForgeSettings  # noqa: E402
from synthorg.forge.hub import ForgeHub  # noqa: E402
from synthorg.forge.signature import sign, verified_event  # noqa: E402
from synthorg.server import KeyStore, ServerSettings, create_app  # noqa: E402
from synthorg.store.protocol import DeliveryState  # noqa: E402
from tests.forge.conftest import SECRET_ENV, example, web_project  # noqa: E402
from tests.server.conftest import serving  # noqa: E402
from tests.server.helpers import make_repo  # noqa: E402
from tests.server.real_stack import real_stack, stack_settings  # noqa: E402

SECRET = "bench-secret-0123456789abcdef"


def _bare_app() -> FastAPI:
    app = FastAPI()

    @app.post("/api/forge/{project}/webhook")
    async def hook(project: str, request: Request) -> Response:
        verified_event(request.headers, await request.body(), SECRET)
        return Response(b'{"queued":false}', status_code=202, media_type="application/json")

    return app


def _signed(payload: dict[str, Any], event: str, delivery: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    return body, {
        "content-type": "application/json",
        "x-github-event": event,
        "x-github-delivery": delivery,
        "x-hub-signature-256": sign(body, SECRET),
    }


async def _throughput(url: str, n: int, concurrency: int, tag: str) -> float:
    refused = example("issue_comment.created")
    refused["comment"] |= {"body": "/synthorg go", "author_association": "NONE"}
    bodies = [_signed(refused, "issue_comment", f"{tag}-{i}") for i in range(n)]
    queue: asyncio.Queue[tuple[bytes, dict[str, str]]] = asyncio.Queue()
    for item in bodies:
        queue.put_nowait(item)
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def worker() -> None:
            while not queue.empty():
                body, headers = queue.get_nowait()
                answer = await client.post("/api/forge/web/webhook", content=body, headers=headers)
                assert answer.status_code == 202, answer.text

        start = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(worker())
        return n / (time.perf_counter() - start)


async def main(deliveries: int, concurrency: int, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="forge-bench-") as tmp:
        root = Path(tmp)
        repo = root / "project"
        make_repo(repo, {"README.md": b"hello\n"})
        keys = KeyStore(root / "keys.json")
        settings = ServerSettings(repository_roots=(root,), keys_file=keys.path)
        stack = stack_settings(root / "home")
        forge = ForgeSettings(projects={"web": web_project(repo, model="done")})
        async with real_stack(stack, repositories=settings.repository_policy(stack)) as wired:
            hub = ForgeHub.build(forge, {SECRET_ENV: SECRET}, wired.store, wired.service)
            app = create_app(
                settings, store=wired.store, run_service=wired.service, auth=keys, forge=hub
            )
            async with serving(app) as url:
                ours = await _throughput(url, deliveries, concurrency, "ours")
                drained = time.perf_counter()
                while await wired.store.queued_deliveries(1):  # the backlog settled first
                    await asyncio.sleep(0.01)
                drain_s = time.perf_counter() - drained
                latencies = []
                async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                    for i in range(runs):
                        labeled = copy.deepcopy(example("issues.labeled"))
                        labeled["issue"]["number"] = 100 + i
                        body, headers = _signed(labeled, "issues", f"lat-{i}")
                        answer = await client.post(
                            "/api/forge/web/webhook", content=body, headers=headers
                        )
                        accepted = time.perf_counter()
                        assert answer.status_code == 202
                        while True:
                            [row] = [
                                r
                                for r in await wired.store.recent_deliveries(50)
                                if r.delivery_id == f"lat-{i}"
                            ]
                            if row.state is not DeliveryState.QUEUED:
                                break
                            await asyncio.sleep(0.002)
                        latencies.append(time.perf_counter() - accepted)
                        assert row.state is DeliveryState.STARTED, row.outcome
                        assert row.conversation_id is not None
                        await wired.service.wait(row.conversation_id)
        async with serving(_bare_app()) as url:
            bare = await _throughput(url, deliveries, concurrency, "bare")
    print(
        f"deliveries/s accepted: synthorg {ours:.0f}, bare FastAPI + signature {bare:.0f}, "
        f"ratio {ours / bare:.2f} ({deliveries} deliveries, concurrency {concurrency})"
    )
    print(f"backlog of {deliveries} refused deliveries settled {drain_s:.1f} s after the last 202")
    print(
        f"accepted -> run started: median {statistics.median(latencies) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms ({runs} runs)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--deliveries", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.deliveries, args.concurrency, args.runs))
