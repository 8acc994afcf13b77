"""Isolated runtimes that SynthOrg builds into its data dir (the OpenHands SDK venv)."""

from synthorg.runtime.openhands import (
    OpenHandsRuntime,
    RuntimeStatus,
    build_runtime,
    find_runtime,
    runtime_status,
)

__all__ = ["OpenHandsRuntime", "RuntimeStatus", "build_runtime", "find_runtime", "runtime_status"]
