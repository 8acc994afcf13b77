"""run_task.py for the bench's ``--split-sandbox``: the real entrypoint, with phase stamps.

Copied beside the real entrypoint (renamed ``run_task_real.py``) into a scratch runtime-files
directory (``SYNTHORG_OPENHANDS_FILES``). It runs the real ``main()`` unchanged but stamps
when the interpreter started, when the SDK was imported and when the conversation was built,
and writes the stamps to ``.oh-bench-phases`` in the workspace (the only way out of the
sandbox; the gate commits it with the run, where the bench reads it).
"""

import time

STAMPS = [("interpreter", time.time())]

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_task_real as real  # noqa: E402

_import, _build = real.import_sdk, real.build_conversation


def import_sdk(*args):  # type: ignore[no-untyped-def]
    terminal = _import(*args)
    STAMPS.append(("sdk_imported", time.time()))
    return terminal


def build(spec, on_event, *args):  # type: ignore[no-untyped-def]
    conversation = _build(spec, on_event, *args)
    STAMPS.append(("conversation_built", time.time()))
    with open(os.path.join(spec.workspace_path, ".oh-bench-phases"), "w") as out:
        json.dump(STAMPS, out)
    return conversation


real.import_sdk, real.build_conversation = import_sdk, build
sys.exit(real.main())
