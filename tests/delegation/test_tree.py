"""The tree of runs through the service, the API and the CLI."""

from __future__ import annotations

import subprocess
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.service.delegation import ledger_spend
from synthorg.service.options import RunOptions
from synthorg.service.tree import run_tree
from tests import support
from tests.cli.cli_support import SYNTHORG, cli_env

from .conftest import Booter
from .scripts import delegate, edit

pytestmark = pytest.mark.bwrap


async def test_api_and_cli_show_the_tree_with_ledger_spend(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "A\n")},
        {"prompt": edit("notes.txt", "golf\n", "G\n")},
    )
    async with booted() as components:
        store = components.store
        parent = await components.service.create(support.make_task(repo, prompt), RunOptions())
        await components.service.run(parent.id)
        children = await store.list_children(parent.id)
        tree = await run_tree(store, parent.id)
        assert [c.id for c in tree.children] == [c.id for c in children]
        own = {r.id: await ledger_spend(store, r.id) for r in (parent, *children)}
        assert tree.cost_usd == own[parent.id] > 0
        assert tree.tree_cost_usd == sum(own.values(), Decimal(0))

        keys = KeyStore(tmp_path / "keys.json")
        viewer = keys.create("alice", {Role.VIEWER})[1]
        settings = ServerSettings(keys_file=keys.path, repository_roots=(tmp_path,))
        app = create_app(settings, store=store, run_service=components.service, auth=keys)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://testserver",
                headers={"Authorization": f"Bearer {viewer}"},
            ) as client,
        ):
            response = await client.get(f"/api/conversations/{parent.id}/tree")
            assert response.status_code == 200, response.text
            body = response.json()
            assert [c["id"] for c in body["children"]] == [c.id for c in children]
            assert Decimal(body["tree_cost_usd"]) == tree.tree_cost_usd
            assert all(c["parent_id"] == parent.id for c in body["children"])
            view = (await client.get(f"/api/conversations/{children[0].id}")).json()
            assert view["parent_id"] == parent.id and view["root_id"] == parent.id

    shown = subprocess.run(
        [*SYNTHORG, "conversations", "tree", parent.id],
        env=cli_env(components.settings.home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    for record in (parent, *children):
        assert record.id in shown.stdout
    assert f"${tree.tree_cost_usd} tree" in shown.stdout
