"""What one request may cost: the bounds admission reserves and refuses on, and unreported bills.

Every figure is computed from the request as it will be sent, so everything the upstream bills
is in it: messages, tool schemas, tool calls and results, content parts, images, ``n`` and the
output cap.

- Upper bound (reserved): one token per byte of the request's JSON (a byte-level tokenizer never
  emits more tokens than bytes, and the JSON carries every billed field plus its punctuation),
  plus ``admission_image_tokens`` per image part, plus ``n`` x the output cap (the caller's, or
  the model's maximum, which the gateway then sends as the cap so the upstream enforces it).
- Lower bound (refused when it exceeds what is left): request bytes / ``admission_bytes_per_token``
  and one output token; images and most of the output may be cheap, so they count as zero.
- When the upstream reports no usage for an answer that ended (complete, or cut by the gateway
  at the ceiling): the upper-bound prompt and one token per byte of the output received (at
  most the cap, unless the output certainly ran past it: then all of it). An
  incomplete answer (stalled, the caller gone, the upstream failing after the request was sent)
  is billed its whole reservation: the upstream may have generated (and hidden reasoning used)
  up to the cap, and the caller must not be able to hang up to dodge the bill.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from synthorg.gateway.config import GatewayConfig, ModelPrice
from synthorg.gateway.wire import ChatRequest, Usage

Ending = Literal["answered", "refused", "incomplete"]
"""How a request ended when its upstream reported no usage: a complete answer, an upstream
refusal before generating (not billed), or anything cut short (billed its reservation)."""


@dataclass(frozen=True, slots=True)
class Bounds:
    """Token bounds of one request and their prices."""

    prompt_max: int
    """Prompt tokens the upstream can bill at most."""
    prompt_min: int
    """Prompt tokens it bills at least."""
    output_max: int
    """Output tokens it can bill at most (n x the cap)."""
    price: ModelPrice

    @property
    def worst(self) -> Decimal:
        """The most the request can cost: what admission reserves."""
        return self.price.cost(self.prompt_max, self.output_max)

    bytes_per_token: float
    """The most bytes one token covers (the lower bound's divisor)."""

    @property
    def least(self) -> Decimal:
        """The least the request costs: refused when it exceeds what is left of the ceiling."""
        return self.price.cost(self.prompt_min, 1)

    def least_so_far(self, out_bytes: int) -> Decimal:
        """The least a stream has cost after ``out_bytes`` of output: where it is cut."""
        return self.price.cost(self.prompt_min, max(1, int(out_bytes / self.bytes_per_token)))

    def unreported(self, out_bytes: int) -> Usage:
        """The usage billed for a complete answer whose upstream reported none.

        A token per output byte, no more than the cap while the upstream may have kept to it;
        output certainly past the cap (more tokens than it allows even at the most bytes per
        token) is billed as received: the cap bounds nothing then, and the bill breaks the
        request's reservation (``Meter.settle`` kills the run for it).
        """
        past_cap = out_bytes / self.bytes_per_token > self.output_max
        out = out_bytes if past_cap else min(out_bytes, self.output_max)
        return Usage(
            prompt_tokens=self.prompt_max, completion_tokens=out, total_tokens=self.prompt_max + out
        )

    def reservation(self) -> Usage:
        """The usage billed for an incomplete answer: everything reserved."""
        return Usage(
            prompt_tokens=self.prompt_max,
            completion_tokens=self.output_max,
            total_tokens=self.prompt_max + self.output_max,
        )


def output_cap(request: ChatRequest, config: GatewayConfig, model: str) -> int:
    """The per-choice output cap: the caller's, else the model's maximum."""
    return request.output_cap() or config.output_maximum(model)


def bounds(request: ChatRequest, body: bytes, config: GatewayConfig, model: str) -> Bounds:
    """The bounds of ``request`` whose wire form (as forwarded) is ``body``."""
    size = len(body)
    return Bounds(
        prompt_max=size + request.images() * config.admission_image_tokens,
        prompt_min=int(size / config.admission_bytes_per_token),
        output_max=(request.n or 1) * output_cap(request, config, model),
        price=config.price(model),
        bytes_per_token=config.admission_bytes_per_token,
    )
