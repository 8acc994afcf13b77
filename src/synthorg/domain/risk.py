"""Risk levels of actions, used by confirmation policies."""

from __future__ import annotations

from enum import StrEnum


class RiskLevel(StrEnum):
    """Declared risk of an action, lowest first."""

    UNKNOWN = "unknown"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """Order for comparisons; UNKNOWN ranks like MEDIUM (unjudged is not safe)."""
        return {"unknown": 2, "low": 1, "medium": 2, "high": 3}[self.value]


class ConfirmationPolicy(StrEnum):
    """When an action needs a human decision before it runs."""

    NEVER = "never"
    RISKY = "risky"
    ALWAYS = "always"

    def requires_confirmation(self, risk: RiskLevel, tool_name: str) -> bool:
        """Whether an action with ``risk`` must wait; think/finish never wait."""
        if tool_name in {"think", "finish"}:
            return False
        if self is ConfirmationPolicy.ALWAYS:
            return True
        if self is ConfirmationPolicy.RISKY:
            # What nobody judged is not presumed safe (OpenHands' ConfirmRisky agrees).
            return risk is RiskLevel.UNKNOWN or risk.rank >= RiskLevel.HIGH.rank
        return False
