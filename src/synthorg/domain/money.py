"""Money and the ceiling rule: one Decimal type, one function per question every site asks.

Every figure is a ``Decimal`` of US dollars end to end (the ledger stores exact decimals; no
float ever enters a sum or a comparison). A ceiling of None means "no ceiling". The questions:
how much room is left (``room_left``), whether a request fits it (``fits``, ``fits_or_alone``),
whether a budget is used up (``reached``), what a new budget may still give (``remaining``),
what a set of rows adds up to (``total``: a run's or a tree's spend), and whether a bill broke
the bound it was admitted for (``over_bound``).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal

Money = Decimal
"""US dollars, exact."""

ZERO = Decimal(0)


def money(value: object) -> Money:
    """A figure read back from a store or a wire (text, int, Decimal) as exact money."""
    if isinstance(value, Decimal):
        return value
    if isinstance(value, float):
        raise TypeError(f"money must not be a float ({value!r}): pass it as text")
    return Decimal(str(value))


def total(amounts: Iterable[Money]) -> Money:
    """The exact sum of ``amounts`` (a run's bills, a tree's rows, a budget's holds)."""
    return sum(amounts, ZERO)


def room_left(ceiling: Money, spent: Money, held: Money = ZERO) -> Money:
    """What ``ceiling`` still leaves once ``spent`` and the live holds ``held`` are taken
    (negative once overrun)."""
    return ceiling - spent - held


def fits(ceiling: Money | None, spent: Money, held: Money, worst: Money) -> bool:
    """Whether a request costing at most ``worst`` fits beside what is spent and held."""
    return ceiling is None or room_left(ceiling, spent, held) >= worst


def fits_or_alone(ceiling: Money | None, spent: Money, held: Money, worst: Money) -> bool:
    """The admission rule once a budget is tight: concurrent while it fits, else only alone
    (nothing else held; the caller has checked that the budget is not ``reached``)."""
    return held == 0 or fits(ceiling, spent, held, worst)


def reached(ceiling: Money | None, spent: Money) -> bool:
    """Whether a budget is used up: nothing more is admitted against it."""
    return ceiling is not None and spent >= ceiling


def remaining(ceiling: Money | None, spent: Money) -> Money | None:
    """What a budget still gives (never below zero); None for no ceiling."""
    return None if ceiling is None else max(ceiling - spent, ZERO)


def over_bound(bill: Money, bound: Money) -> bool:
    """Whether a request's bill broke the bound it was admitted for (an over-report)."""
    return bill > bound
