"""What the policy offers a caller choosing a repository: exactly what ``check`` would let it
name, found at or directly under the roots and among the registered projects."""

from __future__ import annotations

from pathlib import Path

from synthorg.service.repositories import RepositoryPolicy
from synthorg.workspace.git import run_git_sync


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    run_git_sync(["init", "-q"], path)
    return path


def test_what_is_offered_is_what_check_allows(tmp_path: Path) -> None:
    root = tmp_path / "root"
    home = root / "home"
    keys = _repo(root / "keys")  # a repository holding the key file: never a repository
    (keys / "keys.json").write_text("{}")
    first, second = _repo(root / "a"), _repo(root / "b")
    _repo(root / "a" / "nested")  # two levels down: not looked for
    (root / "plain").mkdir()  # no git
    _repo(home)  # the data dir made a repository
    project = _repo(tmp_path / "elsewhere" / "project")
    policy = RepositoryPolicy.for_server(
        home, roots=[root], projects=[project], protected=[keys / "keys.json"]
    )

    offered = policy.offered(limit=50)

    assert offered == [first, second, project]
    for path in offered:
        assert policy.check(path) == path
    assert policy.offered(limit=2) == [first, second]


def test_a_root_that_is_a_repository_is_offered_unless_it_holds_the_data_dir(
    tmp_path: Path,
) -> None:
    root = _repo(tmp_path / "root")
    assert RepositoryPolicy.for_server(tmp_path / "home", roots=[root]).offered(10) == [root]
    assert RepositoryPolicy.for_server(root / "home", roots=[root]).offered(10) == []


def test_nothing_is_offered_without_roots_or_with_any_path(tmp_path: Path) -> None:
    _repo(tmp_path / "a")
    assert RepositoryPolicy.for_server(tmp_path / "home", roots=[]).offered(10) == []
    assert RepositoryPolicy(home=tmp_path / "home").offered(10) == []  # the terminal's rule
    missing = RepositoryPolicy.for_server(tmp_path / "home", roots=[tmp_path / "gone"])
    assert missing.offered(10) == []
