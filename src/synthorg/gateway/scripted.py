"""Deterministic scripted models: turns as a function of the history, and a registry of scripts.

A ``ScriptedModel`` is any callable ``(messages, tools) -> ScriptedTurn``. ``ScriptedSequence``
replays a fixed list of turns and fails loudly (``ScriptExhausted`` naming the script) when it
runs out. Scripts are registered by name so a config can say ``script = "demo-fix"``; a name of
the form ``module:attr`` is imported instead (an attr that is a ScriptedModel or a zero-argument
factory of one).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from synthorg.errors import ConfigError, SynthOrgError
from synthorg.gateway.wire import ChatMessage


class ScriptExhausted(SynthOrgError):
    """A scripted model was asked for more turns than its script has."""


@dataclass(frozen=True)
class ScriptedToolCall:
    """One tool call a scripted turn makes."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)

    def arguments_json(self) -> str:
        """The arguments as the JSON string the wire carries."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments), sort_keys=True)


@dataclass(frozen=True)
class ScriptedTurn:
    """The next assistant turn: text and/or tool calls, optionally with explicit token counts."""

    text: str | None = None
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    tokens_in: int | None = None
    tokens_out: int | None = None

    @classmethod
    def say(cls, text: str, **kwargs: Any) -> ScriptedTurn:
        """A text-only turn."""
        return cls(text=text, **kwargs)

    @classmethod
    def call(cls, name: str, text: str | None = None, **arguments: Any) -> ScriptedTurn:
        """A turn with one tool call (and optional text)."""
        return cls(text=text, tool_calls=(ScriptedToolCall(name, arguments),))


class ScriptedModel(Protocol):
    """A deterministic model: the next assistant turn from the history and the tools offered."""

    def __call__(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        """The next turn."""
        ...


def assistant_turns(messages: Sequence[ChatMessage]) -> int:
    """How many assistant turns the history already holds."""
    return sum(1 for message in messages if message.role == "assistant")


class ScriptedSequence:
    """A list of turns replayed in order; raises ScriptExhausted when it runs out.

    By default the position is the number of assistant messages in the history, so the script
    is a pure function of the conversation (a retried request gets the same turn and several
    conversations can share one script). ``by_history=False`` uses a call counter instead, for
    callers that send independent one-shot requests.
    """

    def __init__(
        self, name: str, turns: Sequence[ScriptedTurn], *, by_history: bool = True
    ) -> None:
        self.name = name
        self.turns = tuple(turns)
        self._by_history = by_history
        self._calls = 0
        self._lock = threading.Lock()

    def __call__(
        self, messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
    ) -> ScriptedTurn:
        if self._by_history:
            index = assistant_turns(messages)
        else:
            with self._lock:
                index, self._calls = self._calls, self._calls + 1
        if index >= len(self.turns):
            raise ScriptExhausted(
                f"scripted model {self.name!r} ran out of turns: asked for turn {index + 1}, "
                f"the script has {len(self.turns)}"
            )
        return self.turns[index]


def echo(
    messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
) -> ScriptedTurn:
    """Replies with the last user message; useful for smoke tests."""
    last = next((m.text() for m in reversed(messages) if m.role == "user"), "")
    return ScriptedTurn.say(f"echo: {last}")


def demo(
    messages: Sequence[ChatMessage], tools: Sequence[Mapping[str, Any]] | None
) -> ScriptedTurn:
    """The built-in demo model: calls ``finish`` when offered, else answers in text."""
    names = {str(t.get("function", {}).get("name", "")) for t in tools or ()}
    if assistant_turns(messages) == 0 and "finish" in names:
        return ScriptedTurn.call("finish", message="Scripted demo: nothing to change.")
    return ScriptedTurn.say("Scripted demo: done.")


ScriptFactory = Callable[[], ScriptedModel]
_REGISTRY: dict[str, ScriptFactory] = {"echo": lambda: echo, "demo": lambda: demo}
_REGISTRY_LOCK = threading.Lock()


def register_script(name: str, factory: ScriptFactory, *, replace: bool = False) -> None:
    """Register a script factory under ``name`` (a fresh model per provider that uses it)."""
    with _REGISTRY_LOCK:
        if name in _REGISTRY and not replace:
            raise ConfigError(f"script {name!r} is already registered; pass replace=True")
        _REGISTRY[name] = factory


def registered_scripts() -> frozenset[str]:
    """Names of the registered scripts."""
    return frozenset(_REGISTRY)


def resolve_script(name: str) -> ScriptedModel:
    """A fresh model for a registered name or a ``module:attr`` import path."""
    factory = _REGISTRY.get(name)
    if factory is not None:
        return factory()
    module_name, sep, attr = name.partition(":")
    if not sep:
        raise ConfigError(
            f"unknown script {name!r}: register it with synthorg.gateway.scripted.register_script "
            f"or name it as 'module:attr' (registered: {sorted(_REGISTRY)})"
        )
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import script {name!r}: {exc}") from exc
    if isinstance(target, ScriptedSequence):
        return target
    if isinstance(target, type) or _is_factory(target):
        return target()  # type: ignore[no-any-return]
    return target  # type: ignore[no-any-return]


def _is_factory(target: Any) -> bool:
    code = getattr(target, "__code__", None)
    return code is not None and code.co_argcount == 0


def tool_call_id(messages: Sequence[ChatMessage], index: int) -> str:
    """A deterministic id unique within the conversation: a digest of the history + position."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message.model_dump_json(exclude_none=True).encode())
        digest.update(b"\x00")
    digest.update(str(index).encode())
    return f"call_{digest.hexdigest()[:24]}"


def count_tokens(text: str, chars_per_token: int = 4) -> int:
    """Deterministic token estimate: ceil(chars / chars_per_token)."""
    return -(-len(text) // chars_per_token)
