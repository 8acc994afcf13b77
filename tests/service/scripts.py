"""Scripted models used by the service tests (importable as ``tests.service.scripts``)."""

from __future__ import annotations

from synthorg.engine.native.scripts import progress_script

progress_five = progress_script(5, pause_s=0.3)
