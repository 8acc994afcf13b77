"""In-sandbox entrypoint: run one OpenHands SDK conversation, stream its events as JSON lines.

Run with the runtime venv's python (never the main venv): ``run_task.py [WORKSPACE]``, where
WORKSPACE is the worktree's path inside, when the host knows it at launch (the agent's
terminal then starts there before the spec arrives: ``synthorg_oh_terminal``). Protocol:
- stdin line 1: the run spec (``RunSpec``); later stdin lines: control messages
  ``{"type": "pause" | "interrupt" | "resume" | "message" | "confirm", ...}``.
- stdout: one JSON object per line, nothing else (fd 1 is moved aside for the event stream;
  the SDK's prints and logs go to stderr).
Needs ``synthorg_oh_events.py`` and ``synthorg_oh_terminal.py`` from the same directory (bind
the whole directory).
Exit code 0 when the agent finished or the host detached at a wait point, 1 on a run
error, 2 on an invalid spec.
"""

from __future__ import annotations

import faulthandler
import json
import os
import queue
import signal
import sys
import tempfile
import threading
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# The event-stream module ships beside this file; explicit so -P / -I runs still find it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthorg_oh_events import EventWriter, Translator, claim_stdout, gateway_code
from synthorg_oh_terminal import EarlyTerminal, adopt

# Stable uuid5 namespace so a non-UUID conversation id always maps to the same SDK id.
_ID_NAMESPACE = uuid.UUID("5b1d6c4e-8f3a-4c2e-9a57-0e6f3b9d2a11")


class RunSpec(BaseModel):
    """The one JSON line the host writes first on stdin."""

    model_config = ConfigDict(extra="forbid")

    task_prompt: str = Field(description="The task, sent as the first user message.")
    model: str = Field(description="Model name at the gateway (sent as openai/<name>).")
    gateway_base_url: str = Field(description="OpenAI-compatible gateway base URL.")
    gateway_token: str = Field(description="Per-run bearer for the gateway and MCP server.")
    mcp_base_url: str | None = Field(None, description="Credentialed MCP server (HTTP).")
    workspace_path: str = Field(description="The worktree the tools operate in.")
    persistence_dir: str = Field(description="Where conversation state is persisted.")
    conversation_id: str = Field(description="Stable id; the same id resumes.")
    max_turns: int = Field(50, ge=1, description="SDK max iterations per run() call.")
    project_id: str = Field(description="Project the run belongs to (tags the state).")
    confirmation_policy: Literal["never", "risky", "always"] = Field(
        "never", description="Which actions wait for a confirmation decision."
    )
    risk_threshold: Literal["low", "medium", "high"] = Field(
        "high", description="With 'risky': the lowest risk that needs confirmation."
    )
    security_analyzer: bool = Field(False, description="Enable the LLM security analyzer.")
    terminal_type: Literal["tmux", "subprocess"] | None = Field(
        None, description="Terminal backend; None lets the SDK choose (tmux if present)."
    )
    input_cost_per_token: float | None = Field(None, description="Price for cost metering.")
    output_cost_per_token: float | None = Field(None, description="Price for cost metering.")
    resume_messages: list[str] = Field(
        default_factory=list, description="On resume: user messages no run has seen yet."
    )
    resume_answers: dict[str, str] = Field(
        default_factory=dict,
        description="On resume: action id -> the host's observation of an action left open.",
    )


def prepare_environment() -> None:
    """Env the SDK reads at import: no network price fetch, throwaway HOME, private tmux."""
    scratch = tempfile.mkdtemp(prefix="openhands-run-")
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["OPENHANDS_SUPPRESS_BANNER"] = "1"
    os.environ["HOME"] = os.path.join(scratch, "home")
    os.environ["TMUX_TMPDIR"] = os.path.join(scratch, "tmux")
    os.makedirs(os.environ["HOME"], exist_ok=True)
    os.makedirs(os.environ["TMUX_TMPDIR"], exist_ok=True)
    # The subprocess terminal runs an interactive bash on a PTY; without this its readline
    # wraps every command's output in bracketed-paste escapes.
    with open(os.path.join(os.environ["HOME"], ".inputrc"), "w") as inputrc:
        inputrc.write("set enable-bracketed-paste off\n")


#: What the first model request imports on its way out (litellm's OpenAI-compatible path, the
#: openai client's resources, HTTP/2): ~1.2 s of CPU, measured with the lock's versions.
_FIRST_REQUEST_MODULES = (
    "openai",
    "h2.connection",
    "openhands.sdk.llm.provider_connection_store",
    "litellm._service_logger",
    "litellm.llms.litellm_proxy.chat.transformation",
    "litellm.llms.openai.chat.gpt_audio_transformation",
    "litellm.llms.vertex_ai.vertex_ai_partner_models.anthropic.transformation",
    "litellm.responses.mcp.litellm_proxy_mcp_handler",
)


def import_sdk(workspace: str | None = None) -> EarlyTerminal | None:
    """Import what the run needs before the spec is read (nothing here depends on it): the
    ~6 s of imports are then paid while a pooled sandbox waits for its run, not after. With
    the workspace's path, the agent's terminal starts as soon as its module is imported (its
    fixed 1 s start-up then overlaps the rest of the import)."""
    import contextlib
    import importlib

    import openhands.sdk
    import openhands.tools.terminal

    terminal = EarlyTerminal(workspace) if workspace else None
    import openhands.tools.file_editor  # noqa: F401

    for name in _FIRST_REQUEST_MODULES:  # a module a later SDK moved is only not warmed
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    openai = sys.modules.get("openai")
    if openai is not None:  # the client loads its resources on first use: no request is made
        client = openai.OpenAI(api_key="unused", base_url="http://127.0.0.1:9/v1")
        client.chat.completions.create  # noqa: B018
    return terminal


def sdk_conversation_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        return uuid.uuid5(_ID_NAMESPACE, raw)


def build_conversation(
    spec: RunSpec, on_event: Any, early_terminal: EarlyTerminal | None = None
) -> Any:
    """The SDK LLM, Agent (terminal, file editor, MCP) and a persisted LocalConversation."""
    from openhands.sdk import LLM, Agent, LocalConversation, Tool
    from openhands.sdk.security.confirmation_policy import (
        AlwaysConfirm,
        ConfirmRisky,
        NeverConfirm,
    )
    from openhands.sdk.security.llm_analyzer import LLMSecurityAnalyzer
    from openhands.sdk.security.risk import SecurityRisk
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool

    model = spec.model if spec.model.startswith("openai/") else f"openai/{spec.model}"
    llm = LLM(
        model=model,
        base_url=spec.gateway_base_url,
        api_key=spec.gateway_token,
        num_retries=0,
        usage_id="agent",
        input_cost_per_token=spec.input_cost_per_token,
        output_cost_per_token=spec.output_cost_per_token,
    )
    terminal = (
        early_terminal.take(spec.workspace_path, spec.terminal_type) if early_terminal else None
    )
    terminal_params = {"terminal_type": spec.terminal_type} if spec.terminal_type else {}
    if terminal is not None:
        terminal_params = {}  # the adopted instance has them (a resume checks names only)
    mcp_config: dict[str, Any] = {}
    if spec.mcp_base_url:
        mcp_config["synthorg"] = {
            "url": spec.mcp_base_url,
            "transport": "http",
            "headers": {"Authorization": f"Bearer {spec.gateway_token}"},
        }
    agent = Agent(
        llm=llm,
        tools=[
            Tool(name=TerminalTool.name, params=terminal_params),
            Tool(name=FileEditorTool.name),
        ],
        mcp_config=mcp_config,
    )
    conversation = LocalConversation(
        agent=agent,
        workspace=spec.workspace_path,
        persistence_dir=spec.persistence_dir,
        conversation_id=sdk_conversation_id(spec.conversation_id),
        callbacks=[on_event],
        max_iteration_per_run=spec.max_turns,
        visualizer=None,
        tags={"project": spec.project_id.lower()[:256]} if spec.project_id else None,
    )
    if terminal is not None:  # before the agent resolves its tools (on send_message)
        adopt(terminal, conversation.state)
    threshold = SecurityRisk[spec.risk_threshold.upper()]
    policy = {
        "never": NeverConfirm(),
        "always": AlwaysConfirm(),
        "risky": ConfirmRisky(threshold=threshold),
    }[spec.confirmation_policy]
    conversation.set_confirmation_policy(policy)
    conversation.set_security_analyzer(LLMSecurityAnalyzer() if spec.security_analyzer else None)
    return conversation


class Driver:
    """Runs the conversation on a worker thread; applies control lines between and during runs."""

    def __init__(self, conversation: Any, writer: EventWriter, translator: Translator) -> None:
        self.conversation = conversation
        self.writer = writer
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.translator = translator
        self.running = False
        self.stdin_open = True
        self.resume_requested = False  # "resume" arrived before a requested pause took hold
        self.silent: set[str] = set()  # events the host logged itself: not streamed back

    def on_event(self, event: Any) -> None:
        """The SDK callback: stream the event (unless the host wrote it)."""
        if event.id in self.silent:
            self.silent.discard(event.id)
            return
        self.writer.emit(self.translator.translate(event))

    def recover_head(self) -> None:
        """Move the branch head to the newest event when a killed process left it behind.

        The SDK writes each event at once but the head (``leaf_event_id``) with the base
        state, later: after a SIGKILL the action in flight is on disk but off the active
        branch, so the model would never hear of it. Only a linear descendant of the head
        is taken (a deliberate navigation elsewhere is left alone).
        """
        from openhands.sdk.event.base import LLMConvertibleEvent

        state = self.conversation.state
        nodes = [e for e in state.events if isinstance(e, LLMConvertibleEvent)]
        leaf = state._resolve_active_leaf()
        if not nodes or leaf is None or nodes[-1].id == leaf:
            return
        lineage = {e.id for e in state._events.path_to_root(nodes[-1].id)}
        if leaf in lineage:
            with state:
                state.leaf_event_id = nodes[-1].id

    def answer_open_actions(self, answers: dict[str, str]) -> int:
        """Answer every action a previous process left open, before anything else is sent.

        The host's own observation (what its log says: effect unknown, not executed) goes
        into the model's history paired with its call, so the model hears what happened and
        no user message can land between a tool call and its result. A wait for a decision
        from before the restart ends with it. Returns how many actions were answered.
        """
        from openhands.sdk.conversation.state import ConversationExecutionStatus as S
        from openhands.sdk.event import AgentErrorEvent

        state = self.conversation.state
        self.recover_head()
        open_actions = self.pending_actions()
        with state:
            for action in open_actions:
                answer = answers.get(action.id) or (
                    "the run was stopped while this tool was in progress (or waiting for a "
                    "decision); its effect is unknown - check before repeating it"
                )
                event = AgentErrorEvent(
                    error=answer, tool_name=action.tool_name, tool_call_id=action.tool_call_id
                )
                self.silent.add(event.id)
                self.conversation._on_event(event)
            if state.execution_status == S.WAITING_FOR_CONFIRMATION:
                state.execution_status = S.IDLE
        if open_actions:
            # The cold-load view dropped the unmatched calls; now that each is answered the
            # view is rebuilt with them, or the model would miss what it asked for.
            state.rebuild_view()
        return len(open_actions)

    def status(self, summary: str, **extra: Any) -> None:
        cost = self.translator.totals()[0]
        self.writer.emit({"kind": "status", "summary": summary, "accumulated_cost": cost, **extra})

    def start_run(self) -> None:
        self.running = True

        def target() -> None:
            try:
                self.conversation.run()
                self.inbox.put(("run_done", None))
            except Exception as exc:  # surfaced as an error event, never swallowed
                self.inbox.put(("run_done", exc))

        threading.Thread(target=target, name="openhands-run", daemon=True).start()

    def pending_actions(self) -> list[Any]:
        from openhands.sdk.conversation.state import ConversationState

        return list(
            ConversationState.get_unmatched_actions(self.conversation.state.active_branch())
        )

    def after_run(self, error: BaseException | None) -> int | None:
        """Emit the outcome of a run() call; return an exit code when the process is done."""
        from openhands.sdk.conversation.state import ConversationExecutionStatus as S

        status = self.conversation.state.execution_status
        cost = self.translator.totals()[0]
        if status == S.FINISHED:
            finish = next(
                (
                    ev
                    for ev in reversed(list(self.conversation.state.events))
                    if getattr(ev, "tool_name", None) == "finish" and hasattr(ev, "action")
                ),
                None,
            )
            message = getattr(getattr(finish, "action", None), "message", None)
            self.writer.emit({"kind": "finished", "summary": message, "accumulated_cost": cost})
            return 0
        if status == S.WAITING_FOR_CONFIRMATION:
            pending = [
                {
                    "action_id": a.id,
                    "tool_name": a.tool_name,
                    "tool_call_id": a.tool_call_id,
                    "risk": a.security_risk.value,
                    "summary": a.summary,
                }
                for a in self.pending_actions()
            ]
            self.writer.emit(
                {"kind": "confirmation_request", "pending": pending, "accumulated_cost": cost}
            )
            return None
        if status == S.PAUSED:
            self.status("paused")
            return None
        detail = str(error) if error is not None else f"run ended in status {status.value}"
        code = gateway_code(error) or status.value
        self.writer.emit(
            {"kind": "error", "code": code, "content": detail, "accumulated_cost": cost}
        )
        return 1

    def confirm(self, control: dict[str, Any]) -> bool:
        """Apply a decision bound to action ids; refuse one that does not match the wait."""
        from openhands.sdk.event import UserRejectObservation

        pending = {a.id: a for a in self.pending_actions()}
        accept, reject = set(control.get("accept", [])), set(control.get("reject", []))
        if not pending or accept & reject or (accept | reject) != set(pending):
            self.writer.emit(
                {
                    "kind": "decision_refused",
                    "pending": sorted(pending),
                    "content": "a decision must name every pending action id exactly once",
                }
            )
            return False
        reason = str(control.get("reason") or "Rejected by the operator")
        with self.conversation.state:
            for action_id in sorted(reject):
                action = pending[action_id]
                # The SDK only rejects all pending actions at once; per-id rejection
                # appends the same observation for just the named ones.
                self.conversation._on_event(
                    UserRejectObservation(
                        action_id=action.id,
                        tool_name=action.tool_name,
                        tool_call_id=action.tool_call_id,
                        rejection_reason=reason,
                    )
                )
        self.status("decision_applied", accepted=sorted(accept), rejected=sorted(reject))
        return True

    def handle(self, control: dict[str, Any]) -> None:
        kind = control.get("type")
        if kind == "pause":
            self.conversation.pause()
        elif kind == "interrupt":
            self.conversation.interrupt()
        elif kind == "message":
            self.conversation.send_message(str(control.get("text", "")))
            if not self.running:
                self.start_run()
        elif kind == "resume":
            if self.running:
                self.resume_requested = True
            else:
                self.start_run()
        elif kind == "confirm":
            if self.running:
                self.writer.emit({"kind": "decision_refused", "content": "no wait is pending"})
            elif self.confirm(control):
                self.start_run()
        else:
            self.writer.emit({"kind": "control_refused", "content": f"unknown control {kind!r}"})

    def loop(self) -> int:
        while True:
            if not self.running and not self.stdin_open:
                self.status("detached")  # host went away at a wait point; state is persisted
                return 0
            item = self.inbox.get()
            if item[0] == "run_done":
                self.running = False
                code = self.after_run(item[1])
                if code is not None:
                    return code
                if self.resume_requested:
                    self.resume_requested = False
                    if self.conversation.state.execution_status.value == "paused":
                        self.start_run()
            elif item[0] == "eof":
                self.stdin_open = False
            else:
                self.handle(item[1])


def read_controls(inbox: queue.Queue[Any], writer: EventWriter) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            control = json.loads(line)
            if not isinstance(control, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            writer.emit({"kind": "control_refused", "content": f"bad control line: {exc}"})
            continue
        inbox.put(("control", control))
    inbox.put(("eof", None))


def read_spec(writer: EventWriter, specs: list[RunSpec]) -> None:
    """The first stdin line as the run spec; an invalid one ends the process at once (2)."""
    try:
        specs.append(RunSpec.model_validate_json(sys.stdin.readline()))
    except ValidationError as exc:
        writer.emit({"kind": "error", "code": "invalid_spec", "content": str(exc)})
        sys.stderr.flush()
        os._exit(2)  # the import may still be running on the main thread


def main() -> int:
    writer = claim_stdout()
    # `kill -USR1 <pid>` dumps every thread's stack to stderr: how to diagnose a hung run.
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    prepare_environment()
    # The spec is read (and an invalid one refused) while the SDK is imported.
    specs: list[RunSpec] = []
    reader = threading.Thread(target=read_spec, args=(writer, specs), daemon=True)
    reader.start()
    terminal = import_sdk(sys.argv[1] if len(sys.argv) > 1 else None)
    reader.join()
    spec = specs[0]
    translator = Translator()
    drivers: list[Driver] = []  # the callback exists before the driver does
    conversation = build_conversation(spec, lambda event: drivers[0].on_event(event), terminal)
    translator.attach(conversation)
    driver = Driver(conversation, writer, translator)
    drivers.append(driver)
    resumed = len(conversation.state.events) > 0
    answered = driver.answer_open_actions(spec.resume_answers) if resumed else 0
    driver.status(
        "resumed" if resumed else "started",
        conversation_id=str(conversation.id),
        persisted_events=len(conversation.state.events),
        answered_open_actions=answered,
    )
    threading.Thread(target=read_controls, args=(driver.inbox, writer), daemon=True).start()
    try:
        if not resumed:
            conversation.send_message(spec.task_prompt)
        for text in spec.resume_messages:  # a finished conversation continues with these
            conversation.send_message(text)
        if conversation.state.execution_status.value == "waiting_for_confirmation":
            driver.after_run(None)  # still waiting for a decision from before the restart
        else:
            driver.start_run()
        return driver.loop()
    finally:
        conversation.close()


if __name__ == "__main__":
    sys.exit(main())
