"""Red-team attacks on a delegation tree's one budget, as a hostile API client makes them."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from synthorg.domain import ConversationRecord, ConversationStatus, TerminationReason
from synthorg.gateway.ticket import Ticket
from synthorg.server import KeyStore, Role, ServerSettings, create_app
from synthorg.service.boot import Components
from synthorg.service.options import RunOptions
from synthorg.service.tree import ledger_spend
from synthorg.store.reconcile import claimant
from tests import support

from .conftest import Booter
from .scripts import delegate, edit

pytestmark = pytest.mark.bwrap

BUDGET = Decimal("0.05")


@asynccontextmanager
async def operator_api(components: Components, home: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The real API over the booted service, as an operator."""
    keys = KeyStore(home / "keys.json")
    operator = keys.create("mallory", {Role.OPERATOR})[1]
    settings = ServerSettings(keys_file=keys.path, repository_roots=(home,))
    app = create_app(settings, store=components.store, run_service=components.service, auth=keys)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://testserver",
            headers={"Authorization": f"Bearer {operator}"},
        ) as client,
    ):
        yield client


async def _three_generations(
    components: Components, repo: Path, prompt: str, budget: Decimal
) -> tuple[ConversationRecord, ConversationRecord, ConversationRecord]:
    """Runs a root whose child delegates once; the root, its child and its grandchild."""
    service, store = components.service, components.store
    root = await service.create(
        support.make_task(repo, prompt), RunOptions(budget_usd=budget, max_turns=500)
    )
    await service.run(root.id)
    (child,) = await store.list_children(root.id)
    (grandchild,) = await store.list_children(child.id)
    return root, child, grandchild


async def test_deleting_a_spent_child_does_not_give_its_spend_back_to_the_tree(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    # The parent gives 90% to a child that spends all of it, then spins to the tree's ceiling.
    prompt = delegate({"prompt": "SPIN", "budget_share": 0.9}, then_spin=True)
    async with booted() as components, operator_api(components, tmp_path) as api:
        store, service = components.store, components.service
        parent = await service.create(
            support.make_task(repo, prompt), RunOptions(budget_usd=BUDGET, max_turns=500)
        )
        first = await service.run(parent.id)
        assert first.termination_reason is TerminationReason.BUDGET_EXHAUSTED, first.error
        (child,) = await store.list_children(parent.id)
        child_spent = await ledger_spend(store, child.id)
        assert child_spent > BUDGET / 2
        tree = await store.tree_budget(parent.id)
        assert tree is not None and tree.spent == child_spent + await ledger_spend(store, parent.id)

        # Attack: delete the spent child (it is not running), then run the parent again.
        deleted = await api.delete(f"/api/conversations/{child.id}")
        again = await api.post(
            f"/api/conversations/{parent.id}/messages", json={"text": "go on", "run": True}
        )
        if again.status_code == 200:
            await service.wait(parent.id)
        after = await store.tree_budget(parent.id)
        assert after is not None
        parent_spent = await ledger_spend(store, parent.id)
        total = parent_spent + child_spent
        largest = max(t.cost_usd for t in first.turns)
        assert total <= BUDGET + largest, (
            f"delete {deleted.status_code}: the tree spent ${total} of ${BUDGET}"
        )
        # The ledger still answers for every cent the tree spent.
        assert deleted.status_code == 409, deleted.text
        assert after.spent == parent_spent + child_spent


async def test_a_new_run_of_a_delegating_child_does_not_spend_its_carve_again(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    # The root lends a quarter to a child; the child lends 90% of it to a grandchild that spends
    # it all, then spins to its own lowered ceiling. Its carve covers its whole subtree.
    child_prompt = delegate({"prompt": "SPIN", "budget_share": 0.9}, then_spin=True)
    prompt = delegate({"prompt": child_prompt, "budget_share": 0.25})
    root_budget = Decimal("0.2")
    async with booted() as components, operator_api(components, tmp_path) as api:
        store, service = components.store, components.service
        _, child, grandchild = await _three_generations(components, repo, prompt, root_budget)
        assert child.budget_usd is not None

        async def subtree() -> Decimal:
            own = await ledger_spend(store, child.id)
            return own + await ledger_spend(store, grandchild.id)

        before = await subtree()
        # Attack: a message starts a new run of the child, which spins on.
        again = await api.post(
            f"/api/conversations/{child.id}/messages", json={"text": "go on", "run": True}
        )
        assert again.status_code == 200, again.text
        await service.wait(child.id)
        one_request = Decimal("0.01")  # far above any single request of these scripts
        assert await subtree() <= child.budget_usd + one_request, (
            f"the child's subtree spent ${await subtree()} (${before} before the new run) of "
            f"its ${child.budget_usd} carve"
        )


async def test_pausing_and_resuming_every_run_of_a_tree_does_not_renew_a_budget(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    # Two children spin on 45% each while the root spins too; the client pauses the root
    # mid-delegation (the pause cascades), then resumes the root and every child, twice.
    share = 0.45
    prompt = delegate(
        {"prompt": "SPIN", "budget_share": share},
        {"prompt": "SPIN", "budget_share": share},
        then_spin=True,
    )
    root_budget = Decimal("0.1")
    async with booted() as components, operator_api(components, tmp_path) as api:
        store, service = components.store, components.service
        tickets: list[Ticket] = []
        components.gateway.on_settle(tickets.append)
        root = await service.create(
            support.make_task(repo, prompt), RunOptions(budget_usd=root_budget, max_turns=500)
        )
        await service.start(root.id)

        async def children_spending() -> None:
            while True:
                children = await store.list_children(root.id)
                spent = [await ledger_spend(store, c.id) for c in children]
                if len(children) == 2 and all(s > 0 for s in spent):
                    return
                await asyncio.sleep(0.05)  # polled under the deadline below

        await asyncio.wait_for(children_spending(), 120)
        paused = await api.post(f"/api/conversations/{root.id}/pause")
        assert paused.status_code == 200, paused.text
        await service.wait(root.id)
        children = await store.list_children(root.id)
        for _ in range(2):
            for record in (root, *children):
                if not service.is_active(record.id):
                    resumed = await api.post(f"/api/conversations/{record.id}/resume")
                    assert resumed.status_code in (200, 409), resumed.text
            for record in (root, *children):
                await service.wait(record.id)

        children = await store.list_children(root.id)
        final_root = await store.get_conversation(root.id)
        assert final_root.runs >= 2 and all(c.runs >= 2 for c in children), "nothing resumed"
        one_request = max(t.cost for t in tickets)
        spent = {c.id: await ledger_spend(store, c.id) for c in children}
        for child in children:
            assert child.budget_usd is not None
            assert spent[child.id] <= child.budget_usd + one_request, (child.id, spent)
        tree = await store.tree_budget(root.id)
        assert tree is not None
        root_spent = await ledger_spend(store, root.id)
        assert tree.spent == root_spent + sum(spent.values(), Decimal(0))
        assert tree.spent <= root_budget + one_request
        # The gateway's settled tickets and the ledger agree to the cent.
        assert sum((t.cost for t in tickets), Decimal(0)) == tree.spent


HOSTILE_BUDGETS = ["NaN", "Infinity", "-Infinity", "-1", "-0.01", "1e300", "1e15", '"NaN"', '"-0"']
HOSTILE_BUDGETS += ['"1e3"', '" 1"', '"0x10"', '"1_000"', '"+1"', "true", '"1.5.1"']


async def test_the_api_refuses_every_budget_that_is_not_a_plain_amount(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    async with booted() as components, operator_api(components, tmp_path) as api:

        async def create(budget: str, prompt: str = "SPIN", start: str = "false") -> httpx.Response:
            body = (
                f'{{"repository": "{repo}", "prompt": {json.dumps(prompt)}, "start": {start}, '
                f'"budget_usd": {budget}}}'
            )
            return await api.post(
                "/api/conversations", content=body, headers={"Content-Type": "application/json"}
            )

        refused = {b: (await create(b)).status_code for b in HOSTILE_BUDGETS}
        assert {b: s for b, s in refused.items() if s != 422} == {}
        # The largest budget the text form spells is accepted, and a delegate call carves it.
        assert (await create("999999999999999")).status_code == 201
        prompt = delegate({"prompt": edit("notes.txt", "alpha\n", "A\n"), "budget_share": 0.3})
        made = await create('"999999999999999.999999999999999"', prompt, "true")
        assert made.status_code == 201, made.text
        root_id = made.json()["id"]
        result = await components.service.wait(root_id)
        assert result is not None and result.termination_reason is TerminationReason.COMPLETED
        (child,) = await components.store.list_children(root_id)
        assert child.budget_usd is not None and child.budget_usd > Decimal("2.9e14")


async def test_shares_that_add_up_past_one_carve_no_more_than_is_left(
    booted: Booter, repo: Path
) -> None:
    # 1.0 + 1e-16 is 1.0 in floating point: summed so, the shares passed the "at most 1" rule
    # and the two carves together took more than the parent had left.
    prompt = delegate(
        {"prompt": edit("notes.txt", "alpha\n", "A\n"), "budget_share": 1.0},
        {"prompt": edit("notes.txt", "golf\n", "G\n"), "budget_share": 1e-16},
    )
    budget = Decimal("100000000000000")
    async with booted() as components:
        root = await components.service.create(
            support.make_task(repo, prompt), RunOptions(budget_usd=budget)
        )
        result = await components.service.run(root.id)
        carves = [c.budget_usd or 0 for c in await components.store.list_children(root.id)]
        left = budget - result.turns[0].cost_usd
        assert sum(carves) <= left, f"carved ${sum(carves)} of the ${left} left"


async def test_deleting_a_spent_root_keeps_the_trees_ledger_and_leaves_no_orphan(
    booted: Booter, repo: Path, tmp_path: Path
) -> None:
    # A grandchild edits and finishes under a child that delegated to it; the root finishes.
    child_prompt = delegate({"prompt": edit("notes.txt", "alpha\n", "A\n"), "budget_share": 0.5})
    prompt = delegate({"prompt": child_prompt, "budget_share": 0.5})
    async with booted() as components, operator_api(components, tmp_path) as api:
        store = components.store
        root, child, grandchild = await _three_generations(components, repo, prompt, BUDGET)
        tree = (root.id, child.id, grandchild.id)
        spent = {cid: await ledger_spend(store, cid) for cid in tree}
        assert all(s > 0 for s in spent.values()), spent
        budget = await store.tree_budget(root.id)
        assert budget is not None and budget.spent == sum(spent.values())

        # A member running in another live process (its claim and its record) holds the
        # whole tree back.
        other = claimant().model_copy(update={"pid": os.getppid()})
        await store.claim_conversation(grandchild.id, other, lease_s=60)
        running = grandchild.model_copy(update={"status": ConversationStatus.RUNNING})
        await store.save_conversation(running)
        refused = await api.delete(f"/api/conversations/{root.id}")
        assert refused.status_code == 409 and grandchild.id in refused.text, refused.text
        assert (await api.get(f"/api/conversations/{root.id}")).status_code == 200
        await store.save_conversation(grandchild)
        await store.release_conversation(grandchild.id, other.owner_id)

        deleted = await api.delete(f"/api/conversations/{root.id}")
        assert deleted.status_code == 200, deleted.text
        # The ledger still answers for every cent the tree spent.
        assert {cid: await ledger_spend(store, cid) for cid in tree} == spent
        # The tree went with its root: no member is left to run outside any tree's budget.
        for cid in (child.id, grandchild.id):
            assert (await api.get(f"/api/conversations/{cid}")).status_code == 404
            again = await api.post(
                f"/api/conversations/{cid}/messages", json={"text": "go on", "run": True}
            )
            assert again.status_code == 404, again.text
