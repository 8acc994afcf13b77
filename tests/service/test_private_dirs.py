"""Every directory the control plane puts a socket, key or state in is its own: made by it,
its uid's, 0700, not a symlink, and nothing above it another user may rename or replace.

Another local user who owned ``SYNTHORG_HOME/run`` renamed the run's socket dir away, planted
its own ``gateway.sock`` there and received the run's bearer. These boots are real
(``service.boot``) over data dirs where such a user got there first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from synthorg.errors import ConfigError
from synthorg.localsock import private_dir
from synthorg.service.boot import boot
from synthorg.service.loops import default_provisioner, default_registry
from tests.support import scripted_settings

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown to another uid")

OTHER_UID, OTHER_GID = 999, 995  # synthorg-sandbox: any uid but ours
SCRIPT = "tests.sandbox.test_redteam_more:planned_commands"  # never asked: no run starts


def _theirs(path: Path, mode: int = 0o755) -> Path:
    path.mkdir(mode=mode, exist_ok=True)
    os.chmod(path, mode)
    os.chown(path, OTHER_UID, OTHER_GID)
    return path


async def _boot(home: Path) -> None:
    settings = scripted_settings(home, SCRIPT, model="m")
    async with boot(settings, registry=default_registry(), provisioner=default_provisioner):
        pass


def _run_owned_by_another_user(home: Path) -> Path:
    return _theirs(home / "run")


def _keys_owned_by_another_user(home: Path) -> Path:
    keys = _theirs(home / "keys")
    (keys / "gateway-signing.key").write_bytes(b"k" * 48)  # theirs to know: bearers forged
    return keys


def _run_a_symlink_to_their_dir(home: Path) -> Path:
    theirs = _theirs(home.parent / "elsewhere", 0o700)
    (home / "run").symlink_to(theirs)
    return theirs


def _data_dir_writable_by_them(home: Path) -> Path:
    os.chown(home, OTHER_UID, OTHER_GID)  # they can rename run/ away and plant their own
    return home


@pytest.mark.parametrize(
    "plant",
    [
        _run_owned_by_another_user,
        _keys_owned_by_another_user,
        _run_a_symlink_to_their_dir,
        _data_dir_writable_by_them,
    ],
)
async def test_boot_refuses_a_dir_another_user_controls_and_plants_nothing(
    tmp_path: Path, plant: Callable[[Path], Path]
) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    theirs = plant(home)
    before = sorted(p.name for p in theirs.iterdir())
    with pytest.raises(ConfigError) as refused:
        await _boot(home)
    message = str(refused.value)
    assert "uid" in message or "symlink" in message or "write" in message, message
    assert sorted(p.name for p in theirs.iterdir()) == before  # no socket, key or dir of ours


async def test_boot_makes_its_dirs_private_and_checks_them_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    await _boot(home)
    for sub in ("run", "keys"):
        info = os.lstat(home / sub)
        assert (info.st_uid, info.st_mode & 0o7777) == (os.getuid(), 0o700), sub
    os.chmod(home / "run", 0o777)  # loosened meanwhile: the next start narrows it again
    await _boot(home)
    assert os.lstat(home / "run").st_mode & 0o777 == 0o700


def test_private_dir_refuses_another_users_dir_anywhere_above(tmp_path: Path) -> None:
    theirs = _theirs(tmp_path / "theirs")
    ours = theirs / "ours"
    ours.mkdir(mode=0o700)
    with pytest.raises(PermissionError, match=str(theirs)):
        private_dir(ours / "run")
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)  # world-writable, not sticky: anyone may rename entries
    with pytest.raises(PermissionError, match="write"):
        private_dir(open_to_all / "run")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)  # like /tmp: only an entry's owner may rename it
    assert private_dir(sticky / "run") == sticky / "run"
