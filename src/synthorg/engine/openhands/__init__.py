"""The OpenHands execution loop: the real SDK, run only inside the sandbox, behind a protocol."""

from synthorg.engine.openhands.config import OpenHandsLoopConfig, OpenHandsLoopDeps
from synthorg.engine.openhands.container_runtime import (
    ContainerConversation,
    ContainerLaunch,
    ContainerRuntime,
    SandboxRunner,
)
from synthorg.engine.openhands.conversation import (
    ControlCommand,
    ConversationFactory,
    EventSink,
    OpenHandsConversation,
    OpenHandsOutcome,
    OpenHandsRunSpec,
)
from synthorg.engine.openhands.errors import (
    OpenHandsLoopError,
    OpenHandsRuntimeError,
    OpenHandsUnavailableError,
)
from synthorg.engine.openhands.events import (
    OpenHandsEvent,
    PendingWire,
    RuntimeNotice,
    RuntimeRecord,
    parse_record,
)
from synthorg.engine.openhands.loop import (
    LOOP_TYPE,
    OpenHandsLoop,
    make_loop_with_callback,
    openhands_factory,
)

OPENHANDS_FACTORIES = {LOOP_TYPE: openhands_factory}
"""The registry entry to merge into a LoopRegistry."""

__all__ = [
    "LOOP_TYPE",
    "OPENHANDS_FACTORIES",
    "ContainerConversation",
    "ContainerLaunch",
    "ContainerRuntime",
    "ControlCommand",
    "ConversationFactory",
    "EventSink",
    "OpenHandsConversation",
    "OpenHandsEvent",
    "OpenHandsLoop",
    "OpenHandsLoopConfig",
    "OpenHandsLoopDeps",
    "OpenHandsLoopError",
    "OpenHandsOutcome",
    "OpenHandsRunSpec",
    "OpenHandsRuntimeError",
    "OpenHandsUnavailableError",
    "PendingWire",
    "RuntimeNotice",
    "RuntimeRecord",
    "SandboxRunner",
    "make_loop_with_callback",
    "openhands_factory",
    "parse_record",
]
