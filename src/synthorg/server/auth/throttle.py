"""Failed API key checks per client address, in a sliding window (console sign-ins, REST
Bearer keys and WebSocket auth frames alike: one count per address).

Past ``max_failures`` in ``window_s`` every key from that address is refused (429 with
Retry-After) until the oldest failure leaves the window, whatever key it presents: the
answer then says nothing about the key. A success does not clear the count (a caller holding
one valid key could otherwise reset it between guesses). Memory is bounded: at most
``max_clients`` addresses are tracked, the least recently failing dropped first.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class KeyThrottle:
    """Counts failed key checks per address; says how long a limited address must wait."""

    def __init__(
        self,
        max_failures: int,
        window_s: float,
        *,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.max_clients = max_clients
        self._clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    def retry_after(self, client: str) -> int | None:
        """Whole seconds ``client`` must wait before trying again; None when it may try."""
        times = self._failures.get(client)
        if times is None:
            return None
        now = self._clock()
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        if len(times) < self.max_failures:
            return None
        return max(1, math.ceil(times[0] + self.window_s - now))

    def failed(self, client: str) -> None:
        """Record a failed key check from ``client``."""
        times = self._failures.pop(client, None) or deque(maxlen=self.max_failures)
        times.append(self._clock())
        self._failures[client] = times  # most recent last
        while len(self._failures) > self.max_clients:
            self._failures.popitem(last=False)
