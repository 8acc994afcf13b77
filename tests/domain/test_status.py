"""Termination reasons map to explicit conversation statuses."""

from __future__ import annotations

from synthorg.domain import ConversationStatus, TerminationReason, TokenUsage


def test_every_reason_maps_to_a_status() -> None:
    for reason in TerminationReason:
        assert isinstance(reason.conversation_status(), ConversationStatus)


def test_no_op_is_failure_and_shutdown_is_resumable() -> None:
    assert TerminationReason.NO_OP.conversation_status() is ConversationStatus.FAILED
    assert TerminationReason.SHUTDOWN.conversation_status() is ConversationStatus.PAUSED
    assert TerminationReason.COMPLETED.conversation_status().is_ended


def test_usage_delta_never_negative() -> None:
    later = TokenUsage(tokens_in=10, tokens_out=5)
    assert later.minus(TokenUsage(tokens_in=4, tokens_out=1)) == TokenUsage(
        tokens_in=6, tokens_out=4
    )
    assert TokenUsage().minus(later) == TokenUsage()


def test_confirmation_policies() -> None:
    from synthorg.domain import ConfirmationPolicy, RiskLevel

    risky = ConfirmationPolicy.RISKY
    assert risky.requires_confirmation(RiskLevel.HIGH, "terminal")
    assert risky.requires_confirmation(RiskLevel.UNKNOWN, "some_mcp_tool")
    assert not risky.requires_confirmation(RiskLevel.MEDIUM, "file_editor")
    assert not risky.requires_confirmation(RiskLevel.HIGH, "finish")
    assert ConfirmationPolicy.ALWAYS.requires_confirmation(RiskLevel.LOW, "terminal")
    assert not ConfirmationPolicy.ALWAYS.requires_confirmation(RiskLevel.LOW, "think")
    assert not ConfirmationPolicy.NEVER.requires_confirmation(RiskLevel.HIGH, "terminal")
