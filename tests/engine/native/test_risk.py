"""The risk classifier: nothing that may write, run or hide a command is ever LOW."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthorg.domain import ConfirmationPolicy, RiskLevel
from synthorg.engine.native.tools import edit_risk, terminal_risk

# Write- or exec-capable invocations of "read-only" tools, and shell syntax around reads.
WRITE_CAPABLE = [
    "find . -delete",
    "find . -name '*.pyc' -delete",
    "find . -fprint out.txt",
    "find . -fprint0 out.txt",
    "find . -fprintf out.txt '%p'",
    "find . -fls out.txt",
    "find . -exec sh -c 'echo x > y' \\;",
    "find . -execdir sh evil.sh {} +",
    "find . -ok rm {} \\;",
    "find . -okdir rm {} \\;",
    'find . -"delete"',
    "find . '-fprintf' f x",
    "find . -type f -print0 | xargs -0 rm",
    "sed -i 's/a/b/' f.py",
    "sed -n 'w out' f",
    "sed 'e touch x' f",
    "awk 'BEGIN { system(\"touch x\") }'",
    "awk '{ print > \"out\" }' f",
    "git -c core.pager='sh -c x' log",
    "git -c alias.st='!touch x' st",
    "git -ccore.fsmonitor=x status",
    "git --config-env=core.pager=EVIL log",
    "git --exec-path=/tmp/evil status",
    "git -C /tmp/other status",
    "git diff --output=file",
    "git log --outp=file",
    "git diff --ext-diff",
    "git grep -O foo",
    "git grep --open-files-in-pager=vi foo",
    "git branch newbranch",
    "git branch -D main",
    "less README.md",
    "more README.md",
    "vi README.md",
    "man ls",
    "tee out.txt",
    "ls | tee out.txt",
    "cat a > b",
    "cat a >> b",
    "cat a >| b",
    "ls &> out",
    "ls &>> out",
    "ls 2> err",
    "cat <<< 'text'",
    "cat << EOF\nx\nEOF",
    "cat <> f",
    "echo $(touch x)",
    'echo "$(touch x)"',
    "echo `touch x`",
    'echo "`touch x`"',
    "cat <(touch x)",
    "diff <(ls) >(tee out)",
    "$(echo ls) -la",
    "`echo rm` x",
    "$CMD",
    "ls $HOME",
    "echo ${X:=y}",
    "ls {a,b}",
    "{ ls; touch x; }",
    "(ls; touch x)",
    "ls & touch x",
    "ls; touch x",
    "ls && touch x",
    "ls || touch x",
    "ls | sh",
    "ls |& sh",
    "xargs grep foo",
    "ls | xargs cat",
    "env X=1 cat f",
    "env -S 'sh -c x'",
    "env find . -delete",
    "nice -n 5 find . -delete",
    "timeout 5 find . -fprint x",
    "nohup cat f",
    "stdbuf -o0 cat f",
    "time cat f",
    "LD_PRELOAD=/tmp/x.so cat f",
    "GIT_CONFIG_PARAMETERS=x git status",
    "sh -c 'find . -delete'",
    "bash -c ls",
    "python3 -c 'import os'",
    "perl -e 'unlink q(x)'",
    "node -e 'x'",
    "eval ls",
    "source script.sh",
    ". script.sh",
    "exec ls",
    "command ls",
    "builtin echo",
    "sort -o out f",
    "sort f -o out",
    "uniq in out",
    "cp a b",
    "mv a b",
    "tar xf a.tar",
    "tar cf out.tar .",
    "dd if=/dev/zero of=f",
    "touch x",
    "mkdir d",
    "ln -s a b",
    "rg --pre ./evil.sh foo",
    "rg --pre=./evil.sh foo",
    "rg --hostname-bin=./evil.sh foo",
    "file -C -m magic",
    "tree -o out",
    "date -s '2020-01-01'",
    "hostname evil",
    "./ls",
    "/bin/ls",
    "ls\rx",
    "ls \\\n-la",
    "ls '",
    "",
    "find -\\\n-delete",
    "find . -name x -newer *",
    "find * -maxdepth 0",
]

READ_ONLY = [
    "ls -la",
    "cat README.md",
    "git status",
    "git diff --stat",
    "git log --oneline -5",
    "git show HEAD",
    "git branch -a",
    "git --no-pager log -3",
    "find . -name '*.py' -type f",
    "find src -maxdepth 2 -newermt 2020-01-01 -print",
    "grep -rn 'a;b|c>d' src",
    'grep -n "$" f',  # `$` alone in double quotes is literal
    "grep -n 'a$' f",
    "echo cost: $ 5",
    "rg -n foo src",
    "ls *.py",
    "grep x -- *",
    "cat src/*.py",
    "head -5 a | grep x",
    "git log | head -20",
    "ls && git status",
    "ls 2>/dev/null",
    "ls > /dev/null 2>&1",
    "wc -l f # a comment > x",
    "env",
    "pwd",
]


@pytest.mark.parametrize("command", WRITE_CAPABLE)
def test_a_command_that_may_write_or_run_something_is_never_low(command: str) -> None:
    assert terminal_risk(command) is not RiskLevel.LOW


@pytest.mark.parametrize(
    "command",
    [
        "find . -fprintf out.txt '%p'",
        "find . -execdir sh evil.sh {} +",
        'find . -"delete"',
        "env find . -delete",
        "sh -c 'find . -delete'",
        "git -c core.pager='sh -c x' log",
        "git --config-env=core.pager=EVIL log",
        "git diff --output=file",
        "rg --pre ./evil.sh foo",
        "$(echo ls) -la",
        "eval ls",
        'r"m" -rf build',
    ],
)
def test_a_write_hidden_behind_a_read_only_tool_asks_under_confirm_risky(command: str) -> None:
    risk = terminal_risk(command)
    assert risk is RiskLevel.HIGH
    assert ConfirmationPolicy.RISKY.requires_confirmation(risk, "terminal")


@pytest.mark.parametrize("command", READ_ONLY)
def test_plain_reads_stay_low(command: str) -> None:
    assert terminal_risk(command) is RiskLevel.LOW


_OPERATORS = [";", "&&", "||", "|", "|&", "&", "\n", " ; ", " && ", " | "]
# A comment swallows what follows it on its line, in bash as here: not composed after.
_LOW = st.sampled_from([c for c in READ_ONLY if "#" not in c])
_NOT_LOW = st.sampled_from([c for c in WRITE_CAPABLE if c])


@settings(max_examples=400, deadline=None)
@given(low=_LOW, other=_NOT_LOW, operator=st.sampled_from(_OPERATORS), low_first=st.booleans())
def test_composing_a_read_with_anything_else_is_never_low(
    low: str, other: str, operator: str, low_first: bool
) -> None:
    command = low + operator + other if low_first else other + operator + low
    assert terminal_risk(command) is not RiskLevel.LOW, command


@settings(max_examples=300, deadline=None)
@given(
    low=_LOW,
    wrap=st.sampled_from(["$({})", "`{}`", "<({})", '"$({})"', "{{ {}; }}", "({})"]),
    other=_NOT_LOW,
)
def test_a_read_around_a_substitution_or_group_is_never_low(
    low: str, wrap: str, other: str
) -> None:
    assert terminal_risk(f"{low} {wrap.format(other)}") is not RiskLevel.LOW


@pytest.mark.parametrize(
    ("command", "path", "risk"),
    [
        ("view", ".git/config", RiskLevel.LOW),
        ("view", "calc.py", RiskLevel.LOW),
        ("create", "calc.py", RiskLevel.MEDIUM),
        ("str_replace", "src/calc.py", RiskLevel.MEDIUM),
        ("insert", "/workspace/calc.py", RiskLevel.MEDIUM),
        ("create", ".git", RiskLevel.HIGH),
        ("create", ".gitattributes", RiskLevel.HIGH),
        ("str_replace", ".git/config", RiskLevel.HIGH),
        ("create", "sub/.git/hooks/pre-commit", RiskLevel.HIGH),
        ("create", ".github/workflows/ci.yml", RiskLevel.HIGH),
        ("create", ".gitmodules", RiskLevel.HIGH),
        ("create", "../outside.py", RiskLevel.HIGH),
        ("create", "/etc/passwd", RiskLevel.HIGH),
        ("frobnicate", "calc.py", RiskLevel.UNKNOWN),
    ],
)
def test_file_editor_risk(command: str, path: str, risk: RiskLevel) -> None:
    assert edit_risk(command, path) is risk
