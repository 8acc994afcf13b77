"""Risk of actions for the confirmation policy: what a terminal command or an edit may do.

LOW means "provably only reads": one of a few read-only tools, with arguments checked
against that tool's write- and exec-capable options, and no redirection, expansion,
substitution or compound syntax around it. Anything the classifier cannot prove is at least
MEDIUM; a write or an exec hidden behind a read-only tool (``find -fprintf``, ``git -c``,
``rg --pre``), a command whose name is computed, ``eval``/``source`` and the destructive,
networked and publishing commands are HIGH, so ``--confirm risky`` asks for them.

Words come from :func:`shlex.split`; a small quote-aware scanner runs first because shlex
does not say which characters were quoted (``';'`` and ``;`` give the same token), and that
is exactly what decides whether bash sees an operator, an expansion or a glob.

Out of scope: a shell session already changed by an approved command (an alias or a function
named ``ls``); the approval of that earlier command is the control.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Flag, auto
from pathlib import PurePosixPath

from synthorg.domain import RiskLevel

# Destructive, networked or publishing commands: a person should see them before they run.
# Matched on the raw text, so they count wherever they appear (inside `sh -c`, `xargs`, ...).
_HIGH = re.compile(
    r"""
    \brm\s+(-[a-zA-Z]*\s+)*-[a-zA-Z]*[rf]                 # rm -rf / -r / -f in any order
    | \b(curl|wget|ssh|scp|sftp|rsync|nc|ncat|telnet|ftp)\b
    | \bgit\s+(push|reset\s+--hard|clean\s+-[a-z]*f|filter-branch|update-ref\s+-d)
    | \b(sudo|su|doas|mkfs\w*|dd|shred|chown|shutdown|reboot|kill|pkill|killall)\b
    | \bchmod\s+(-R|777)
    | \b(pip|pip3|npm|yarn|pnpm|cargo|gem)\s+(install|publish|upload)
    | \btwine\s+upload
    | >\s*/dev/(sd|nvme|disk)
    | :\(\)\s*\{                                            # fork bomb
    | \bfind\b[\s\S]*\s-(delete|exec|execdir|ok|okdir|fprint|fprint0|fprintf|fls)\b
    """,
    re.VERBOSE,
)


class _Seen(Flag):
    """Unquoted shell syntax found in one simple command."""

    NONE = 0
    REDIRECT = auto()  # <, >, >>, >|, &>, <<, <<<, <> (except to /dev/null or an fd)
    EXPANSION = auto()  # $var, ${...}, $'...', {a,b}
    SUBSTITUTION = auto()  # $(...), `...`, <(...), >(...)
    COMPOUND = auto()  # ( ), { }, a background &
    RISKY_GLOB = auto()  # a glob that may expand to an option (`*x`, `-*`)
    CONTROL = auto()  # backslash-newline, CR and other control characters: shlex and bash
    # split these differently


@dataclass
class _Segment:
    """One simple command of a list or pipeline, with the syntax seen around it."""

    text: list[str] = field(default_factory=list)
    seen: _Seen = _Seen.NONE


# A harmless redirection at the start of a word: to /dev/null, or duplicating an fd.
_QUIET = re.compile(r"(\d*>>?|&>>?|\d*<)[ \t]*/dev/null(?=[\s;&|]|$)|\d*[<>]&(\d+|-)(?=[\s;&|]|$)")
_LIST_OPERATORS = ("&&", "||", "|&", "|", ";", "\n")
_EXPANDS = re.compile(r"[A-Za-z_{(\[@*#?$!0-9-]")  # what may follow a `$` that expands
_PLAIN_START = re.compile(r"[A-Za-z0-9_./~,:@%^]")


def _scan(command: str) -> list[_Segment] | None:
    """Simple commands of ``command`` split at unquoted list/pipe operators; None if unbalanced."""
    segments = [_Segment()]
    quote: str | None = None
    word_first: str | None = None  # first raw character of the current word
    i = 0
    while i < len(command):
        seg, ch = segments[-1], command[i]
        if quote == "'":
            quote = None if ch == "'" else quote
            seg.text.append(ch)
            i += 1
            continue
        if ch == "\\":
            if command.startswith("\\\n", i):
                seg.seen |= _Seen.CONTROL
            word_first = word_first or ch
            seg.text.append(command[i : i + 2])
            i += 2
            continue
        if quote == '"':
            if ch == '"':
                quote = None
            elif ch == "`" or command.startswith("$(", i):
                seg.seen |= _Seen.SUBSTITUTION
            elif ch == "$" and _EXPANDS.match(command, i + 1):
                seg.seen |= _Seen.EXPANSION
            seg.text.append(ch)
            i += 1
            continue
        at_word_start = word_first is None
        if at_word_start and (quiet := _QUIET.match(command, i)):
            i = quiet.end()  # dropped from the words: harmless and not an argument
            continue
        operator = next((op for op in _LIST_OPERATORS if command.startswith(op, i)), None)
        if operator is not None:
            segments.append(_Segment())
            word_first = None
            i += len(operator)
            continue
        if ch in " \t":
            word_first = None
        elif at_word_start and ch == "#":
            end = command.find("\n", i)
            i = len(command) if end < 0 else end
            continue
        else:
            word_first = word_first or ch
            seg.seen |= _classify_unquoted(command, i, word_first)
            if ch in "'\"":
                quote = ch
        seg.text.append(ch)
        i += 1
    if quote is not None:
        return None
    return [s for s in segments if "".join(s.text).strip() or s.seen]


def _classify_unquoted(command: str, i: int, word_first: str) -> _Seen:
    ch = command[i]
    nxt = command[i + 1 : i + 2]
    if ch == "`" or (ch == "$" and nxt == "(") or (ch in "<>" and nxt == "("):
        return _Seen.SUBSTITUTION
    if ch == "$" and (nxt in ("'", '"') or _EXPANDS.match(nxt)):
        return _Seen.EXPANSION  # $'..' and $".." are quoting forms that translate escapes
    if ch in "<>":
        return _Seen.REDIRECT
    if ch == "&":
        return _Seen.REDIRECT if nxt == ">" else _Seen.COMPOUND
    if ch in "(){}":
        return _Seen.COMPOUND if ch in "()" or nxt in ("", " ") else _Seen.EXPANSION
    if ch in "*?[" and not _PLAIN_START.match(word_first):
        return _Seen.RISKY_GLOB
    if (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F:
        return _Seen.CONTROL
    return _Seen.NONE


# -- commands ---------------------------------------------------------------------------

_ArgCheck = Callable[[Sequence[str]], RiskLevel]


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _any_args(_args: Sequence[str]) -> RiskLevel:
    return RiskLevel.LOW


def _long_option_is(word: str, names: Sequence[str]) -> bool:
    """``word`` is one of ``names`` or an abbreviation getopt/git would accept for one."""
    if not word.startswith("--") or len(word) <= 3:
        return False
    stem = word.split("=", 1)[0]
    return any(name.startswith(stem) for name in names)


_FIND_SAFE = _names(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -regextype -type "
    "-xtype -size -empty -newer -anewer -cnewer -mtime -mmin -atime -amin -ctime -cmin "
    "-used -perm -user -group -uid -gid -nouser -nogroup -links -inum -samefile -lname "
    "-ilname -readable -writable -executable -maxdepth -mindepth -depth -follow -xdev "
    "-mount -noleaf -daystart -ignore_readdir_race -noignore_readdir_race -prune -print "
    "-print0 -printf -ls -true -false -not -a -and -o -or -quit -L -P -H -d"
)


_FIND_WRITES = _names("-delete -exec -execdir -ok -okdir -fprint -fprint0 -fprintf -fls")


def _find(args: Sequence[str]) -> RiskLevel:
    risk = RiskLevel.LOW
    for word in args:
        if word in _FIND_WRITES:
            return RiskLevel.HIGH
        if word.startswith("-") and word not in _FIND_SAFE and not word.startswith("-newer"):
            risk = RiskLevel.MEDIUM
    return risk


def _rg(args: Sequence[str]) -> RiskLevel:
    # --pre runs a program on every file searched, --hostname-bin one for hyperlinks.
    runs = any(_long_option_is(w, ["--pre", "--hostname-bin"]) for w in args)
    return RiskLevel.HIGH if runs else RiskLevel.LOW


def _file(args: Sequence[str]) -> RiskLevel:
    # -C compiles the magic file given with -m into a new file.
    writes = any(w == "-C" or _long_option_is(w, ["--compile"]) for w in args)
    return RiskLevel.MEDIUM if writes else RiskLevel.LOW


def _bare(args: Sequence[str]) -> RiskLevel:
    return RiskLevel.LOW if not args else RiskLevel.MEDIUM


_READ_ONLY: dict[str, _ArgCheck] = {
    **dict.fromkeys(
        _names(
            "ls cat head tail wc pwd grep egrep fgrep stat du df echo "
            "diff cmp which basename dirname realpath readlink true false id whoami uname nproc"
        ),
        _any_args,
    ),
    "find": _find,
    "rg": _rg,
    "file": _file,
    "env": _bare,  # prints the environment; with arguments it runs a command
    "printenv": _any_args,
}
"""Tools with no write- or exec-capable option (``_any_args``) or a check of their options."""

# -- git ---------------------------------------------------------------------------------

_GIT_HIDDEN_EXEC = ("--config-env", "--exec-path")
_GIT_SAFE_GLOBAL = frozenset({"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs"})
_GIT_DIFF_WRITES = ("--output", "--ext-diff", "--open-files-in-pager")
_GIT_BRANCH_LISTING = _names(
    "-a -r -v -vv -l --all --remotes --verbose --list --show-current --no-color"
)


def _git(args: Sequence[str]) -> RiskLevel:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option == "-c" or option.startswith("-c") or _long_option_is(option, _GIT_HIDDEN_EXEC):
            return RiskLevel.HIGH  # config and exec path can name programs git then runs
        if option not in _GIT_SAFE_GLOBAL:
            return RiskLevel.MEDIUM  # -C, --git-dir, --work-tree: another repository's config
    if not rest:
        return RiskLevel.MEDIUM
    sub, sub_args = rest[0], rest[1:]
    if sub in ("diff", "log", "show", "grep"):
        if any(_long_option_is(w, _GIT_DIFF_WRITES) or w == "-O" for w in sub_args):
            return RiskLevel.HIGH
        return RiskLevel.LOW
    if sub in ("status", "rev-parse", "blame", "ls-files", "describe", "shortlog"):
        return RiskLevel.LOW
    if sub == "branch" and all(w in _GIT_BRANCH_LISTING for w in sub_args):
        return RiskLevel.LOW
    return RiskLevel.MEDIUM


# -- wrappers: classify what they run, never below MEDIUM ---------------------------------

_HIDDEN = frozenset({"eval", "source", ".", "exec", "builtin", "command"})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_WRAPPER_ARGS: dict[str, frozenset[str]] = {
    # wrapper -> its options that take a separate value
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "time": frozenset({"-f", "--format", "-o", "--output"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u"}),
    "setsid": frozenset(),
    "xargs": frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s"}),
}


def _unwrap(name: str, args: list[str]) -> list[str]:
    """The command a wrapper runs (its options, assignments and duration skipped)."""
    takes_value = _WRAPPER_ARGS[name]
    while args and (args[0].startswith("-") or (name == "env" and "=" in args[0])):
        option = args.pop(0)
        if option in takes_value and args:
            args.pop(0)
    if name == "timeout" and args:
        args.pop(0)  # the duration
    return args


def _words_risk(words: list[str]) -> RiskLevel:
    floor = RiskLevel.LOW
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0], re.DOTALL):
        words = words[1:]  # VAR=value prefixes change what the command does (LD_PRELOAD...)
        floor = RiskLevel.MEDIUM
    if not words:
        return RiskLevel.MEDIUM
    name, args = words[0], words[1:]
    if any(c in name for c in "$`") or name in _HIDDEN:
        return RiskLevel.HIGH  # what runs is computed or read from elsewhere
    if name in _SHELLS:
        if "-c" in args[:-1]:
            return _max(RiskLevel.MEDIUM, terminal_risk(args[args.index("-c") + 1]))
        return RiskLevel.MEDIUM
    if name in _WRAPPER_ARGS and not (name == "env" and not args):
        inner = _unwrap(name, list(args))
        if name == "env" and any(w in ("-S", "--split-string") or w.startswith("-S") for w in args):
            return RiskLevel.HIGH
        return _max(RiskLevel.MEDIUM, _words_risk(inner) if inner else RiskLevel.MEDIUM)
    if name == "git":
        return _max(floor, _git(args))
    check = _READ_ONLY.get(name)
    return _max(floor, check(args) if check else RiskLevel.MEDIUM)


def _max(*levels: RiskLevel) -> RiskLevel:
    return max(levels, key=lambda level: level.rank)


_MEMO_MAX_CHARS = 4096
"""Commands up to this length have their risk remembered (bounded memory for the cache)."""


def terminal_risk(command: str) -> RiskLevel:
    """HIGH for destructive, networked, publishing or hidden commands; LOW only for proven
    reads; everything else MEDIUM."""
    if len(command) <= _MEMO_MAX_CHARS:
        return _remembered_risk(command)
    return _terminal_risk(command)


@functools.lru_cache(maxsize=256)
def _remembered_risk(command: str) -> RiskLevel:
    # A pure function of the text, asked several times per call (risk, mutates) and again
    # for a repeated command: the scanner costs ~2 ms for a typical test command.
    return _terminal_risk(command)


def _terminal_risk(command: str) -> RiskLevel:
    if _HIGH.search(command):
        return RiskLevel.HIGH
    segments = _scan(command)
    if not segments:
        return RiskLevel.MEDIUM
    risk = RiskLevel.LOW
    for segment in segments:
        try:
            words = shlex.split("".join(segment.text))
        except ValueError:
            return _max(risk, RiskLevel.MEDIUM)
        if _HIGH.search(" ".join(words)):
            return RiskLevel.HIGH  # the same rule once quotes are removed (r"m" -rf)
        level = _words_risk(words)
        seen = segment.seen
        if seen & _Seen.RISKY_GLOB and words and _READ_ONLY.get(words[0]) is _any_args:
            seen &= ~_Seen.RISKY_GLOB  # these tools have no option a file name could turn on
        if seen:
            level = _max(level, RiskLevel.MEDIUM)
        risk = _max(risk, level)
    return risk


# -- the file editor ---------------------------------------------------------------------

# Files that make host-side git or a CI system run code: editing them is HIGH.
_CONTROL_NAMES = frozenset({".git", ".gitattributes", ".gitmodules", ".github", ".gitlab-ci.yml"})


def edit_risk(command: str, path: str = "") -> RiskLevel:
    """Viewing is LOW; a change is MEDIUM, HIGH for git/CI control files or outside the workspace.

    ``path`` is as the model gave it (relative to the workspace root, or absolute).
    """
    if command == "view":
        return RiskLevel.LOW
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).is_absolute() and parts[1:2] != ("workspace",):
        return RiskLevel.HIGH
    if ".." in parts or any(part in _CONTROL_NAMES for part in parts):
        return RiskLevel.HIGH
    if command in ("create", "str_replace", "insert", "undo_edit"):
        return RiskLevel.MEDIUM
    return RiskLevel.UNKNOWN
