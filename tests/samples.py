"""Small programs several test files lint, and the helpers several test files run them with: one home for each."""

# AMP001: a backward inside an autocast region (a safe fix moves it out).
FLAGGED = """\
import torch

def train(model, x, optimizer):
    with torch.autocast("cuda"):
        loss = model(x).sum()
        loss.backward()
    optimizer.step()
"""

# AMP003 (with a safe fix) at 9:9 and nothing else.
CLIP = """\
import torch


def train(model, optimizer, loader, scaler):
    for inputs, targets in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(inputs).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""


def as_nobody(call):
    """`call()`'s result (anything JSON can carry), computed by a forked child that became `nobody`: root reads and
    writes every file, so only another user meets real permissions. The child runs with the modules the parent has
    loaded; load any it needs first (another user may not be able to reach them)."""
    import json
    import os

    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write_end, json.dumps(call()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        data = handle.read()
    assert os.waitpid(child, 0)[1] == 0, "the child that became nobody failed"
    return json.loads(data)


def invoke_in(folder, args, input=None):
    """The command line run in-process from `folder` (relative paths start there); exceptions propagate."""
    import os

    from click.testing import CliRunner

    from amplint.cli import main

    old = os.getcwd()
    os.chdir(folder)
    try:
        return CliRunner().invoke(main, args, input=input, catch_exceptions=False)
    finally:
        os.chdir(old)


def amplint_process(*args, cwd):
    """This checkout's command line (`python -m amplint ARGS`) run as a real child process from `cwd`: text out."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "amplint", *args], cwd=cwd, capture_output=True, text=True,
                          env=environment, timeout=600)


def notebook_json(sources: list) -> str:
    """A version 4 notebook of one code cell per source (a string or a list of lines), as JSON text."""
    import json

    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
             for source in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
