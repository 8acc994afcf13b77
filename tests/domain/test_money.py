"""The money module's questions agree with each other for any figures (hypothesis)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthorg.domain.money import (
    ZERO,
    fits,
    fits_or_alone,
    money,
    over_bound,
    reached,
    remaining,
    room_left,
    total,
)

amounts = st.decimals(min_value=0, max_value=10**6, places=6, allow_nan=False)
ceilings = st.one_of(st.none(), amounts)


@given(ceilings, amounts, amounts, amounts)
def test_the_questions_agree(
    ceiling: Decimal | None, spent: Decimal, held: Decimal, worst: Decimal
) -> None:
    if ceiling is None:
        assert not reached(None, spent) and remaining(None, spent) is None
        assert fits(None, spent, held, worst)
        return
    left = remaining(ceiling, spent)
    assert left is not None and left >= 0
    assert reached(ceiling, spent) == (left == 0)
    assert fits(ceiling, spent, held, worst) == (room_left(ceiling, spent, held) >= worst)
    assert fits_or_alone(ceiling, spent, ZERO, worst), "alone always fits (once not reached)"
    assert fits(ceiling, spent, held, worst) <= fits_or_alone(ceiling, spent, held, worst)
    if fits(ceiling, spent, held, worst):  # what fits leaves the budget within its ceiling
        assert spent + held + worst <= ceiling


@given(st.lists(amounts, max_size=20))
def test_total_is_exact(values: list[Decimal]) -> None:
    assert total(values) == sum(values, ZERO)
    assert total(money(str(v)) for v in values) == total(values)


def test_no_float_becomes_money() -> None:
    with pytest.raises(TypeError):
        money(0.1)
    assert money("0.1") + money("0.2") == money("0.3")
    assert over_bound(money("0.1000001"), money("0.1")) and not over_bound(ZERO, ZERO)
