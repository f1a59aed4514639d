"""`amplint server`: a real LSP session over stdio with a small hand-written JSON-RPC client."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from amplint.diagnostics import Location
from amplint.engine import lint_text
from amplint.fixer import apply_edits, fix_text
from amplint.rules import ALL_RULES
from amplint.server import Positions, kind_wanted, uri_to_path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = (ROOT / "examples" / "train_amp.py").read_text(encoding="utf-8")
INFERENCE = '''import torch

scaler = torch.amp.GradScaler("cuda")


@torch.no_grad()
def evaluate(model, x):
    with torch.autocast("cuda"):
        return scaler.scale(model(x))
'''
TIMEOUT = 20  # seconds for any one answer; the whole session takes about 2 s


class Client:
    """Just enough of an LSP client: Content-Length framing, requests, notifications, a reader thread."""

    def __init__(self, cwd: Path, stderr) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen([sys.executable, "-m", "amplint", "server"], cwd=cwd, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        self.inbox: queue.Queue = queue.Queue()
        self.notifications: list[dict] = []
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    self.inbox.put(None)
                    return
                header = header.strip()
                if not header:
                    break
                name, _, value = header.decode("ascii").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.inbox.put(json.loads(stream.read(length)))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def _next(self, deadline: float) -> dict:
        try:
            message = self.inbox.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError("the server did not answer in time") from None
        if message is None:
            raise AssertionError("the server closed its output")
        if "method" in message and "id" in message:  # a request from the server: accept it
            self.send({"id": message["id"], "result": None})
        elif "method" in message:
            self.notifications.append(message)
        return message

    def request(self, method: str, params: dict | None) -> object:
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        deadline = time.monotonic() + TIMEOUT
        while True:
            message = self._next(deadline)
            if message.get("id") == self.next_id and "method" not in message:
                assert "error" not in message, message
                return message["result"]

    def wait_diagnostics(self, uri: str, version: int | None = None) -> dict:
        """The next publishDiagnostics for `uri` (with that version, if given) not yet consumed."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            for note in self.notifications:
                params = note["params"]
                if note["method"] == "textDocument/publishDiagnostics" and params["uri"] == uri \
                        and (version is None or params.get("version") == version) and not note.get("seen"):
                    note["seen"] = True
                    return params
            self._next(deadline)

    def published_versions(self, uri: str) -> list:
        return [n["params"].get("version") for n in self.notifications
                if n["method"] == "textDocument/publishDiagnostics" and n["params"]["uri"] == uri]


def apply_text_edits(text: str, edits: list[dict]) -> str:
    """Apply LSP TextEdits (UTF-16 positions) to a text, last first."""
    positions = Positions(text)

    def offset(position: dict) -> int:
        line_start = positions.starts[position["line"]] if position["line"] < len(positions.starts) else len(text)
        line = text[line_start:].split("\n", 1)[0]
        units = 0
        for index, char in enumerate(line):
            if units >= position["character"]:
                return line_start + index
            units += len(char.encode("utf-16-le")) // 2
        return line_start + len(line)

    spans = sorted(((offset(e["range"]["start"]), offset(e["range"]["end"]), e["newText"]) for e in edits),
                   reverse=True)
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


@pytest.fixture
def workspace(tmp_path):
    plain = tmp_path / "plain"
    configured = tmp_path / "configured"
    plain.mkdir()
    configured.mkdir()
    (configured / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP003"]\n')
    (plain / "train.py").write_text(EXAMPLE)
    (configured / "train.py").write_text(EXAMPLE)
    (plain / "evaluate.py").write_text(INFERENCE)
    return tmp_path


def codes(params: dict) -> list[str]:
    return sorted(d["code"] for d in params["diagnostics"])


def test_lsp_session_over_stdio(workspace):
    started = time.monotonic()
    with open(workspace / "server.log", "wb") as log:
        client = Client(workspace, log)
        try:
            run_session(client, workspace)
        except BaseException:
            client.process.kill()
            client.process.wait(timeout=TIMEOUT)
            log.flush()
            print((workspace / "server.log").read_text(errors="replace"), file=sys.stderr)
            raise
    assert time.monotonic() - started < 60


def run_session(client: Client, workspace: Path) -> None:
    result = client.request("initialize", {
        "processId": os.getpid(), "rootUri": workspace.as_uri(), "capabilities": {},
        "clientInfo": {"name": "amplint-tests"}})
    capabilities = result["capabilities"]
    assert capabilities["codeActionProvider"]["codeActionKinds"] == ["quickfix", "source.fixAll.amplint"]
    assert result["serverInfo"]["name"] == "amplint"
    client.notify("initialized", {})

    # open: diagnostics at once, with LSP ranges
    uri = (workspace / "plain" / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": EXAMPLE}})
    published = client.wait_diagnostics(uri, 1)
    assert codes(published) == ["AMP001", "AMP003", "AMP004"]
    clip = next(d for d in published["diagnostics"] if d["code"] == "AMP003")
    assert clip["range"]["start"] == {"line": 15, "character": 12}
    assert clip["source"] == "amplint" and clip["severity"] == 2
    assert clip["codeDescription"]["href"].endswith("AMP003.html")

    # a quick fix at the clip: its edit gives the text the fix describes
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": clip["range"], "context": {"diagnostics": [clip]}})
    [action] = [a for a in actions if a["kind"] == "quickfix"]
    assert "unscale_" in action["title"] and action["isPreferred"] is True
    assert action["diagnostics"][0]["code"] == "AMP003"
    fixed_once = apply_text_edits(EXAMPLE, action["edit"]["changes"][uri])
    rules = [rule() for rule in ALL_RULES]
    expected = next(d for d in lint_text(EXAMPLE, "t.py", rules).diagnostics if d.code == "AMP003")
    assert fixed_once == apply_edits(EXAMPLE, list(expected.fix.edits))
    assert "scaler.unscale_(optimizer)\n            torch.nn.utils.clip_grad_norm_" in fixed_once

    # fix all: the `--fix` result
    everything = {"start": {"line": 0, "character": 0}, "end": {"line": 19, "character": 0}}
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": uri}, "range": everything, "context": {"diagnostics": [], "only": ["source.fixAll"]}})
    [fix_all] = actions
    assert fix_all["kind"] == "source.fixAll.amplint"
    fixed_all = apply_text_edits(EXAMPLE, fix_all["edit"]["changes"][uri])
    assert fixed_all == fix_text(EXAMPLE, "t.py", rules).text
    assert lint_text(fixed_all, "t.py", rules).diagnostics == []

    # typing: changes are debounced, only the last version is linted
    changed = time.monotonic()
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": fixed_once}]})
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 3},
                                             "contentChanges": [{"text": fixed_all}]})
    published = client.wait_diagnostics(uri, 3)
    assert time.monotonic() - changed >= 0.25
    assert published["diagnostics"] == []
    assert 2 not in client.published_versions(uri)

    # an incremental change (a range, non-ASCII text) is applied; save publishes at once
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 4}, "contentChanges": [{
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
        "text": "# édité 𝜏\n"}]})
    client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
    assert client.wait_diagnostics(uri, 4)["diagnostics"] == []

    # the project's configuration: AMP003 ignored in that folder
    configured = (workspace / "configured" / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": configured, "languageId": "python", "version": 1, "text": EXAMPLE}})
    assert codes(client.wait_diagnostics(configured, 1)) == ["AMP001", "AMP004"]

    # a broken configuration is shown to the user, not crashed on
    broken = workspace / "broken"
    broken.mkdir()
    (broken / "amplint.toml").write_text("bogus = 1\n")
    broken_uri = (broken / "train.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": broken_uri, "languageId": "python", "version": 1, "text": EXAMPLE}})
    assert client.wait_diagnostics(broken_uri, 1)["diagnostics"] == []
    shown = [n["params"]["message"] for n in client.notifications if n["method"] == "window/showMessage"]
    assert any("unknown key" in message and "bogus" in message for message in shown)

    # an unsafe fix is offered, labelled, not preferred
    inference = (workspace / "plain" / "evaluate.py").as_uri()
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": inference, "languageId": "python", "version": 1, "text": INFERENCE}})
    [finding] = client.wait_diagnostics(inference, 1)["diagnostics"]
    assert finding["code"] == "AMP005"
    actions = client.request("textDocument/codeAction", {
        "textDocument": {"uri": inference}, "range": finding["range"], "context": {"diagnostics": [finding]}})
    [unsafe] = [a for a in actions if a["kind"] == "quickfix"]
    assert unsafe["title"].endswith("(unsafe)") and not unsafe.get("isPreferred")
    assert not [a for a in actions if a["kind"] == "source.fixAll.amplint"]  # no safe fix to apply

    # close clears; shutdown and exit end the process
    client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert client.wait_diagnostics(uri)["diagnostics"] == []
    assert client.request("shutdown", None) is None
    client.notify("exit", None)
    assert client.process.wait(timeout=TIMEOUT) == 0


def test_server_without_pygls_says_so_and_exits_2():
    code = ("import sys; sys.modules['pygls'] = None; sys.modules['lsprotocol'] = None; "
            "import amplint.server; sys.argv = ['amplint', 'server']; from amplint.cli import entry; entry()")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert 'pip install "amplint[server]"' in result.stderr and not result.stdout


def test_positions_count_in_the_agreed_encoding():
    text = "a𝜏é = 1\nb\n"
    after = Location(1, 4)  # the space after "é"
    assert Positions(text).at_location(after) == (0, 4)  # UTF-16: 𝜏 is two code units
    assert Positions(text, "utf-8").at_location(after) == (0, 7)
    assert Positions(text, "utf-32").at_location(after) == (0, 3)
    assert Positions(text).at_location(Location(9, 1)) == (2, 0)  # clamped to the end
    assert Positions(text).end() == (2, 0) and Positions("x").end() == (0, 1)
    assert Positions(text).at_offset(text.index("b")) == (1, 0)


def test_helpers():
    assert kind_wanted("source.fixAll.amplint", ["source.fixAll"]) and kind_wanted("quickfix", None)
    assert not kind_wanted("quickfix", ["source"])
    assert uri_to_path("file:///tmp/a%20b.py") == "/tmp/a b.py" and uri_to_path("untitled:1") is None
