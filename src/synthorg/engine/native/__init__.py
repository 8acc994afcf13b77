"""Native execution loops (react, plan_execute, hybrid), their tools and scripted test models."""

from synthorg.engine.native.errors import ModelBudgetExhausted, ModelCallError
from synthorg.engine.native.factories import NATIVE_FACTORIES
from synthorg.engine.native.hybrid import HybridLoop
from synthorg.engine.native.model import ModelClient, ModelReply, OpenAICompatClient
from synthorg.engine.native.plan_execute import PlanExecuteLoop
from synthorg.engine.native.react import ReactLoop
from synthorg.engine.native.runtime import ModelClientFactory, NativeLoopDeps, http_model_client
from synthorg.engine.native.settings import NativeLoopSettings
from synthorg.engine.native.tools import McpClient, McpClientFactory, ToolExecutor
from synthorg.engine.native.turn import CheckpointHook, CheckpointUnderWay

__all__ = [
    "NATIVE_FACTORIES",
    "CheckpointHook",
    "CheckpointUnderWay",
    "HybridLoop",
    "McpClient",
    "McpClientFactory",
    "ModelBudgetExhausted",
    "ModelCallError",
    "ModelClient",
    "ModelClientFactory",
    "ModelReply",
    "NativeLoopDeps",
    "NativeLoopSettings",
    "OpenAICompatClient",
    "PlanExecuteLoop",
    "ReactLoop",
    "ToolExecutor",
    "http_model_client",
]
