"""Configuration: TOML file plus SYNTHORG__SECTION__KEY overrides, validated with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from synthorg.errors import ConfigError
from synthorg.service.config import RunDefaults, SandboxSettings
from synthorg.settings import SECTIONS, load_settings, section


def test_defaults_without_a_file(tmp_path: Path) -> None:
    settings = load_settings(env={"SYNTHORG_HOME": str(tmp_path)})
    assert settings.home == tmp_path
    assert settings.engine.default_loop_type == "react"
    assert not settings.engine.loop_auto_select_enabled
    assert section(settings, "run", RunDefaults).model == "scripted-demo"


def test_file_then_environment_overrides(tmp_path: Path) -> None:
    config = tmp_path / "synthorg.toml"
    config.write_text(
        '[engine]\nloop_auto_select_enabled = true\ndefault_loop_type = "hybrid"\n'
        '[engine.loop_complexity_overrides]\ncomplex = "openhands"\n'
        '[sandbox]\nbackend = "bwrap"\n'
    )
    settings = load_settings(
        config,
        env={
            "SYNTHORG__ENGINE__MAX_TURNS": "7",
            "SYNTHORG__SANDBOX__LIMITS__MAX_PROCESSES": "64",
            "SYNTHORG__RUN__MODEL": "gpt-x",
        },
    )
    assert settings.engine.loop_auto_select_enabled
    assert settings.engine.max_turns == 7
    assert settings.engine.loop_complexity_overrides["complex"] == "openhands"  # type: ignore[index]
    assert section(settings, "sandbox", SandboxSettings).limits.max_processes == 64
    assert section(settings, "run", RunDefaults).model == "gpt-x"


def test_bad_values_say_where_and_what(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[engine]\ndefault_loop_type = "magic"\nmax_turns = 0\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    message = str(caught.value)
    assert str(config) in message
    assert "engine.default_loop_type: Value error, unknown loop type 'magic'" in message
    assert "engine.max_turns" in message


def test_bad_sections_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "missing.toml", env={})
    broken = tmp_path / "broken.toml"
    broken.write_text("[engine\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken, env={})
    settings = load_settings(env={"SYNTHORG__SANDBOX__BACKEND": "docker"})
    with pytest.raises(ConfigError, match=r"sandbox\.backend"):
        section(settings, "sandbox", SandboxSettings)
    with pytest.raises(ConfigError, match="must be a table"):
        load_settings(env={"SYNTHORG__RUN": "5"})


def test_an_unknown_section_is_an_error_naming_it_and_the_known_ones(tmp_path: Path) -> None:
    config = tmp_path / "typo.toml"
    config.write_text('[sandbx]\nbackend = "local"\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config, env={})
    assert "unknown config section [sandbx]" in str(caught.value)
    assert str(config) in str(caught.value) and "sandbox" in str(caught.value)
    with pytest.raises(ConfigError, match=r"unknown config section \[sandbx\]"):
        load_settings(env={"SYNTHORG__SANDBX__BACKEND": "local"})


def test_every_section_a_component_reads_is_known() -> None:
    import re

    root = Path(__file__).resolve().parents[1] / "src" / "synthorg"
    read = {
        match.group(1)
        for source in root.rglob("*.py")
        for match in re.finditer(r"section\(\s*\w+(?:\.\w+)?,\s*\"(\w+)\"", source.read_text())
    }
    assert read and read <= SECTIONS, read - SECTIONS


def test_loading_settings_does_not_import_the_engine(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from synthorg.settings import load_settings; "
        "s = load_settings(env={}); assert 'synthorg.engine.runner' not in sys.modules, 'early'; "
        "print(s.engine.default_loop_type)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "react"


def test_an_unknown_sandbox_limit_is_an_error_naming_it(tmp_path: Path) -> None:
    """A typo in [sandbox.limits] must not silently run with the default cap."""
    settings = load_settings(env={"SYNTHORG__SANDBOX__LIMITS__MEMORY_BYTS": "1"})
    with pytest.raises(ConfigError, match=r"sandbox\.limits\.memory_byts"):
        section(settings, "sandbox", SandboxSettings)


def test_env_overrides_keep_scalars_as_text_for_the_field_to_validate() -> None:
    """`null` is a model name like any other and `1e3` is not a turn count (issue 35)."""
    settings = load_settings(
        env={"SYNTHORG__RUN__MODEL": "null", "SYNTHORG__SANDBOX__LIMITS__MAX_PROCESSES": "64"}
    )
    assert section(settings, "run", RunDefaults).model == "null"
    assert section(settings, "sandbox", SandboxSettings).limits.max_processes == 64
    with pytest.raises(ConfigError, match="max_turns"):
        load_settings(env={"SYNTHORG__ENGINE__MAX_TURNS": "1e3"})
    # Lists and tables still come as JSON.
    roots = load_settings(env={"SYNTHORG__SERVER__REPOSITORY_ROOTS": '["/srv/a"]'})
    assert roots.sections["server"]["repository_roots"] == ["/srv/a"]
