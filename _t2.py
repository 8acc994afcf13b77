import asyncio, time, tempfile
from pathlib import Path
from synthorg.sandbox import BwrapSandbox, SandboxRequest, SandboxLimits
from tests.sandbox.helpers import collect
v=Path('/root/.cache/synthorg-tests/home/runtimes/openhands/400b3b1c1366dc1b')
ws=Path(tempfile.mkdtemp())
code="import time;t=time.time();import openhands.sdk;print('import',time.time()-t)"
sb=BwrapSandbox()
r=SandboxRequest(argv=[str(v/'bin/python'),'-c',code], workspace=ws, read_only_binds=[v, Path('/root/.pyenv/versions/3.12.1')], env={"LITELLM_LOCAL_MODEL_COST_MAP":"True","PYTHONDONTWRITEBYTECODE":"1"}, conversation_id='x')
t=time.time(); lines, ex = asyncio.run(collect(sb, r)); print("old", lines[-1:], ex.returncode, time.time()-t)
t=time.time(); import subprocess; subprocess.run([str(v/'bin/python'),'-c',code], env={"LITELLM_LOCAL_MODEL_COST_MAP":"True","PYTHONDONTWRITEBYTECODE":"1"}); print("host", time.time()-t)
