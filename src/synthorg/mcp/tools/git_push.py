"""git_push: push the run's branch to the project's remote with the vault's credential.

The push runs from a throwaway bare repository that borrows the project's objects through
``objects/info/alternates``. So no configuration, hook or URL rewrite the sandbox could have
planted in the project repository is ever read while the credential is in git's environment,
and the credential is never written to any git config: it reaches git only through
``GIT_CONFIG_*`` environment variables of the one push process.

A push that times out may still land (the remote already has the pack and may be running its
hooks). So its outcome is then found out, not guessed: the remote's ref is listed (bounded by
``git_timeout_s`` again) until it shows the pushed commit, and the answer is 'landed', 'not
landed' or, when the remote could not be asked, 'unknown'.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import signal
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from synthorg.mcp.errors import ToolFailedError, ToolOutcomeUnknownError, ToolRefusedError
from synthorg.mcp.redact import Redactor, cut
from synthorg.mcp.tools.base import ToolContext
from synthorg.mcp.vault import CredentialKind

_STDERR_TAIL = 2000
_POLL_S = 0.25
"""How often the remote is asked again whether a timed-out push landed."""
# Settings that must hold whatever the host's system config says.
_HARDENING = (
    ("credential.helper", ""),  # never ask or store credentials through a helper
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("http.followRedirects", "false"),  # the header must not follow a redirect elsewhere
    ("protocol.allow", "never"),
    ("protocol.http.allow", "always"),
    ("protocol.https.allow", "always"),
)


class GitPushArgs(BaseModel):
    """Arguments of git_push."""

    model_config = ConfigDict(extra="forbid")

    branch: str | None = Field(
        default=None,
        description="Branch to push; only the run's own branch 'synthorg/<conversation id>' "
        "is allowed. Defaults to it.",
    )
    project_id: str | None = Field(
        default=None, description="Project to act on; only the run's own project is allowed."
    )


def _minimal_env(home: Path, extra_config: Sequence[tuple[str, str]]) -> dict[str, str]:
    # Built from scratch: nothing of the server's environment (other tokens, askpass
    # programs, GIT_DIR redirections) reaches the push.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LC_ALL": "C",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    pairs = [*_HARDENING, *extra_config]
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


class GitTimeoutError(ToolFailedError):
    """A git command ran past its time cap and was killed (its effect, if any, is unknown)."""


async def _git(
    what: str, args: Sequence[str], env: Mapping[str, str], timeout_s: float
) -> tuple[int, str, str]:
    try:
        proc = await asyncio.create_subprocess_exec(
            "git",
            *args,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills helpers too
        )
    except OSError as exc:
        raise ToolFailedError(f"could not start git: {exc.strerror}") from exc
    try:
        async with asyncio.timeout(timeout_s):
            out, err = await proc.communicate()
    except BaseException as exc:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        if isinstance(exc, TimeoutError):
            raise GitTimeoutError(f"git {what} timed out after {timeout_s:g}s") from exc
        raise
    return proc.returncode or 0, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _auth_header(scheme: str, username: str, token: str) -> str:
    if scheme == "bearer":
        return f"Authorization: Bearer {token}"
    pair = base64.b64encode(f"{username}:{token}".encode()).decode()
    return f"Authorization: Basic {pair}"


_PORCELAIN = re.compile(r"^(?P<flag>[ +\-*=!])\t(?P<refs>[^\t]+)\t(?P<summary>.*)$")


def _porcelain_summary(stdout: str) -> str:
    for line in stdout.splitlines():
        match = _PORCELAIN.match(line)
        if match:
            return match["summary"].strip()
    return "done"


class GitPushTool:
    """Pushes the run's branch (never a protected one, never forced) to the configured remote."""

    name = "git_push"
    description = (
        "Push this run's branch (synthorg/<conversation id>) to the project's configured git "
        "remote. Only that branch can be pushed; protected branches and force pushes are "
        "refused. The remote's credential is held by the server and never shown."
    )
    args_model = GitPushArgs
    read_only = False
    destructive = False  # never forced: a push that is not a fast-forward is rejected
    idempotent = True  # the same commit pushed again changes nothing

    async def run(self, ctx: ToolContext, args: GitPushArgs) -> str:
        """Push the branch; return git's one-line summary."""
        scope = ctx.scope
        scope.check_project(args.project_id)
        branch = scope.check_branch(args.branch)
        project = scope.project
        if project.repository is None or project.remote_url is None:
            raise ToolRefusedError(
                f"git_push is not configured for project {project.project_id!r} "
                "(it needs repository and remote_url in the MCP config)"
            )
        async with ctx.lock(f"push:{project.project_id}:{branch}"):
            return await self._push(ctx, branch, project.repository, project.remote_url)

    async def _push(self, ctx: ToolContext, branch: str, repository: Path, remote: str) -> str:
        project = ctx.scope.project
        with tempfile.TemporaryDirectory(prefix="synthorg-push-") as tmp:
            home = Path(tmp)
            plain_env = _minimal_env(home, ())
            timeout = project.git_timeout_s
            code, common, err = await _git(
                "rev-parse",
                ["-C", str(repository), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                plain_env,
                timeout,
            )
            if code != 0:
                raise ToolFailedError(
                    f"project repository {repository} is not a git repository: {err.strip()}"
                )
            objects = Path(common.strip()) / "objects"
            code, sha, _ = await _git(
                "rev-parse",
                [
                    "--git-dir",
                    common.strip(),
                    "rev-parse",
                    "--verify",
                    "--quiet",
                    f"refs/heads/{branch}^{{commit}}",
                ],
                plain_env,
                timeout,
            )
            if code != 0:
                raise ToolRefusedError(
                    f"branch {branch!r} does not exist yet in the project repository; "
                    "commit your work on it first"
                )
            sha = sha.strip()
            staging = home / "staging.git"
            code, _, err = await _git(
                "init",
                ["init", "--quiet", "--bare", "--template=", str(staging)],
                plain_env,
                timeout,
            )
            if code != 0:
                raise ToolFailedError(f"could not prepare the push: {err.strip()}")
            info = staging / "objects" / "info"
            info.mkdir(parents=True, exist_ok=True)
            (info / "alternates").write_text(f"{objects}\n")
            ref = f"refs/heads/{branch}"
            code, _, err = await _git(
                "update-ref",
                ["--git-dir", str(staging), "update-ref", ref, sha],
                plain_env,
                timeout,
            )
            if code != 0:
                raise ToolFailedError(f"could not prepare the push: {err.strip()}")
            token = ctx.vault.get(project.project_id, CredentialKind.GIT)
            extra: list[tuple[str, str]] = []
            if token is not None:
                header = _auth_header(
                    project.git_auth, project.git_username, token.get_secret_value()
                )
                extra.append(("http.extraHeader", header))
            env = _minimal_env(home, extra)
            try:
                # No '+' in the refspec: a push that is not a fast-forward is rejected by git.
                code, out, err = await _git(
                    "push",
                    [
                        "--git-dir",
                        str(staging),
                        "push",
                        "--porcelain",
                        "--no-verify",
                        remote,
                        f"{ref}:{ref}",
                    ],
                    env,
                    timeout,
                )
            except GitTimeoutError as exc:
                landed = await _remote_has(ctx.redactor, staging, env, remote, ref, sha, timeout)
                return _timed_out_answer(exc, landed, branch, sha, remote, timeout)
        if code != 0:
            # Redact the whole output, then keep its tail: a cut never halves a credential.
            detail = cut(ctx.redactor.text(err.strip() or out.strip()), _STDERR_TAIL, keep="tail")
            if token is None and "could not read Username" in detail:
                detail += (
                    f" (the remote requires authentication and project "
                    f"{project.project_id!r} has no git token: set git_token_env in the config)"
                )
            raise ToolFailedError(
                f"git push of {branch} to {remote} failed (exit {code}): {detail}"
            )
        return f"pushed {branch} at {sha[:12]} to {remote}: {_porcelain_summary(out)}"


async def _remote_has(
    redactor: Redactor,
    staging: Path,
    env: Mapping[str, str],
    remote: str,
    ref: str,
    sha: str,
    bound_s: float,
) -> bool | str:
    """Whether ``remote`` shows ``ref`` at ``sha`` within ``bound_s``; why not asked, if not.

    True once a listing shows it, False when listings succeeded but never showed it, and the
    last failure when no listing could be had.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    answered = False
    failure = "no time left to ask"
    while (remaining := deadline - loop.time()) > 0:
        try:
            code, out, err = await _git(
                "ls-remote",
                ["--git-dir", str(staging), "ls-remote", "--refs", remote, ref],
                env,
                remaining,
            )
        except ToolFailedError as exc:  # timed out or could not start: nothing more to learn
            failure = str(exc)
            break
        if code == 0:
            answered = True
            if any(line.split("\t") == [sha, ref] for line in out.splitlines()):
                return True
        else:
            failure = (
                f"git ls-remote exited {code}: {cut(redactor.text(err.strip()), 200, keep='tail')}"
            )
        await asyncio.sleep(min(_POLL_S, max(0.0, deadline - loop.time())))
    return False if answered else failure


def _timed_out_answer(
    exc: GitTimeoutError, landed: bool | str, branch: str, sha: str, remote: str, bound_s: float
) -> str:
    """The answer after a timed-out push: text when it landed, else the matching error."""
    what = f"git push of {branch} to {remote} timed out after {bound_s:g}s"
    if landed is True:
        return (
            f"pushed {branch} at {sha[:12]} to {remote}: {what}, then landed: the remote shows "
            f"{branch} at {sha[:12]}"
        )
    if landed is False:
        raise ToolFailedError(
            f"{what}; not landed: the remote does not show {branch} at {sha[:12]} "
            f"{bound_s:g}s later; push again"
        ) from exc
    raise ToolOutcomeUnknownError(
        f"{what}, and whether it landed is unknown: the remote could not be asked ({landed}); "
        "call git_push again to find out (pushing the same commit again changes nothing)"
    ) from exc
