"""`amplint server`: a real LSP session over stdio with a small hand-written JSON-RPC client."""

from __future__ import annotations

import io
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amplint.diagnostics import Location
from amplint.engine import lint_text
from amplint.fixer import apply_edits, fix_text
from amplint.parallel import process_runs
from amplint.rules import ALL_RULES
from amplint import server
from amplint.server import INVALID_MESSAGE, FrameReader, Positions, kind_wanted, uri_to_path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = (ROOT / "examples" / "train_amp.py").read_text(encoding="utf-8")
INFERENCE = '''import torch

scaler = torch.amp.GradScaler("cuda")


@torch.no_grad()
def evaluate(model, x):
    with torch.autocast("cuda"):
        return scaler.scale(model(x))
'''
TIMEOUT = 600  # seconds: only a guard against a hung server, never a measure (a session takes about 2 s)


class Client:
    """Just enough of an LSP client: Content-Length framing, requests, notifications, a reader thread."""

    def __init__(self, cwd: Path, stderr, command: list[str] | None = None) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        command = command or [sys.executable, "-m", "amplint", "server"]
        self.process = subprocess.Popen(command, cwd=cwd, env=env,
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
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def send_raw(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def answer(self, request_id, deadline: float | None = None) -> dict:
        """The response (result or error) to the request with this id."""
        deadline = deadline or time.monotonic() + TIMEOUT
        while True:
            message = self._next(deadline)
            if message.get("id") == request_id and "method" not in message:
                return message

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
        message = self.call(method, params)
        assert "error" not in message, message
        return message["result"]

    def call(self, method: str, params: dict | None) -> dict:
        """Send a request; its response, an error or not."""
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.answer(self.next_id)

    def initialize(self, workspace: Path) -> dict:
        result = self.request("initialize", {
            "processId": os.getpid(), "rootUri": workspace.as_uri(), "capabilities": {},
            "clientInfo": {"name": "amplint-tests"}})
        self.notify("initialized", {})
        return result

    def stop(self) -> None:
        assert self.request("shutdown", None) is None
        self.notify("exit", None)
        assert self.process.wait(timeout=TIMEOUT) == 0

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


def _session(workspace: Path, body, command: list[str] | None = None) -> None:
    """Run `body(client)` against a server started in `workspace`; the server's log is shown if it fails."""
    with open(workspace / "server.log", "wb") as log:
        client = Client(workspace, log, command)
        try:
            body(client)
        except BaseException:
            client.process.kill()
            client.process.wait(timeout=TIMEOUT)
            log.flush()
            print((workspace / "server.log").read_text(errors="replace"), file=sys.stderr)
            raise
    # the answer written to `initialize` before pygls loaded is the one pygls gives (`server._answered_already`)
    assert "differs from pygls" not in (workspace / "server.log").read_text(errors="replace")


def test_lsp_session_over_stdio(workspace):
    _session(workspace, lambda client: run_session(client, workspace))


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
    assert clip["source"] == "amplint" and clip["severity"] == 1  # AMP003 is an error (a warning is 2)
    assert "codeDescription" not in clip  # no `docs-url`: no link to a site that may not exist
    what, what_to_do = clip["message"].split("\n")  # what is wrong, then the help line
    assert "clips gradients still scaled by `scaler`" in what and what_to_do.startswith("help: Insert `scaler.unscale_(")

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
    refused = client.call("textDocument/codeAction", {   # after shutdown: an error, not silence
        "textDocument": {"uri": inference}, "range": finding["range"], "context": {"diagnostics": [finding]}})
    assert refused["error"]["code"] == -32600 and "shut down" in refused["error"]["message"]
    client.notify("exit", None)
    assert client.process.wait(timeout=TIMEOUT) == 0


def thousand_line_module() -> str:
    """A training module of 1,000 lines: ordinary model and schedule code, the shipped example's loop (its three
    findings) in the middle, and the functions that use what the rest defines."""
    block = '''

class Block{i}(nn.Module):
    """A residual block."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return x + self.proj(self.norm(x))


def schedule_{i}(step: int, warmup: int = 100) -> float:
    return min(1.0, (step + 1) / warmup)
'''
    head, loop = EXAMPLE.split("\n\ndef train(", 1)
    parts = [head + "\n"]
    for i in range(60):
        parts.append(block.format(i=i))
        if i == 30:
            parts.append("\n\ndef train(" + loop)
    text = "".join(parts)
    lines = text.splitlines()
    assert len(lines) <= 1000, len(lines)
    return text + "\n" * (1000 - len(lines))


def test_initialize_is_answered_first_and_a_long_module_is_linted_by_a_warm_worker(workspace, record_property):
    """The server answers `initialize` having loaded pygls and itself, not the linter (its worker starts and loads
    the linter after, on `initialized`), and publishes a 1,000-line module's findings. The times are reported
    (printed, and in the JUnit report's properties), never asserted: they measure the machine as much as amplint."""
    text = thousand_line_module()
    uri = (workspace / "plain" / "long.py").as_uri()
    times = {}

    def body(client: Client) -> None:
        sent = time.monotonic()
        result = client.request("initialize", {"processId": os.getpid(), "rootUri": workspace.as_uri(),
                                               "capabilities": {}})
        times["initialize_s"] = time.monotonic() - sent
        assert result["serverInfo"]["name"] == "amplint"
        client.notify("initialized", {})
        opened = time.monotonic()
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": text}})
        published = client.wait_diagnostics(uri, 1)
        times["first_diagnostics_s"] = time.monotonic() - opened
        assert codes(published) == ["AMP001", "AMP003", "AMP004"]
        client.stop()

    started = time.monotonic()
    _session(workspace, body)
    times["session_s"] = time.monotonic() - started
    for name, seconds in times.items():
        record_property(name, round(seconds, 3))
    print("amplint server, from the process's start: initialize answered in {initialize_s:.2f} s; a 1,000-line "
          "module's first diagnostics {first_diagnostics_s:.2f} s after didOpen".format(**times))


EARLY = pytest.mark.skipif(server._pygls_major() != server.EARLY_PYGLS,
                           reason="`initialize` is answered early for pygls 2 only")


@EARLY
@pytest.mark.parametrize("capabilities", [
    {},
    {"general": {"positionEncodings": ["utf-8", "utf-16"]}},
    {"general": {"positionEncodings": ["utf-7", "utf-32"]}},
    {"general": {"positionEncodings": []}},
    {"textDocument": {"synchronization": {"willSave": True, "willSaveWaitUntil": False, "didSave": True}}},
    {"workspace": {"workspaceFolders": True, "configuration": True}, "window": {"workDoneProgress": True},
     "textDocument": {"codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix"]}}}}},
], ids=["none", "utf-8", "utf-32", "no-encodings", "will-save", "editor"])
def test_the_answer_to_initialize_written_before_pygls_loads_is_pyglss(capabilities):
    """`amplint server` answers `initialize` before loading pygls (0.3-0.4 s of protocol types): the answer it
    writes is the one pygls gives for the same client capabilities."""
    params = {"processId": None, "rootUri": None, "capabilities": capabilities}
    built = server.create_server()
    protocol, sent = built.protocol, []
    protocol._send_response = lambda msg_id, result=None, error=None: sent.append((msg_id, result, error))
    protocol.handle_message(protocol.structure_message({"jsonrpc": "2.0", "id": 7, "method": "initialize",
                                                        "params": params}))
    assert [(msg_id, error) for msg_id, _, error in sent] == [(7, None)]
    assert protocol._converter.unstructure(sent[0][1]) == server.initialize_result(params)


@pytest.mark.parametrize("params", [
    None, {}, {"capabilities": []}, {"capabilities": {"general": {"positionEncodings": "utf-8"}}},
    {"capabilities": {"textDocument": {"synchronization": {"willSave": "yes"}}}},
], ids=["none", "no-capabilities", "capabilities-list", "encodings-string", "will-save-string"])
def test_an_initialize_of_another_shape_is_left_to_pygls(params):
    frame = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()
    reader, out = FrameReader(io.BytesIO(b"Content-Length: %d\r\n\r\n" % len(frame) + frame)), io.BytesIO()
    assert server.answer_initialize(reader, out) is None and out.getvalue() == b""
    rest = reader.readline() + reader.read()  # the request itself, still to be read by pygls
    assert json.loads(rest.split(b"\r\n\r\n", 1)[1]) == json.loads(frame)


@EARLY
def test_initialize_is_answered_before_pygls_is_loaded():
    """The answer is written with neither pygls nor its protocol types loaded; the request stays to be read."""
    probe = ("import io, json, sys\nfrom amplint import server\n"
             "body = json.dumps({'jsonrpc': '2.0', 'id': 3, 'method': 'initialize', 'params': {'capabilities': {}}})"
             ".encode()\nframe = b'Content-Length: %d\\r\\n\\r\\n' % len(body) + body\n"
             "reader, out = server.FrameReader(io.BytesIO(frame + frame)), io.BytesIO()\n"
             "answered = server.answer_initialize(reader, out)\n"
             "print(json.dumps([answered[0], sorted(m for m in sys.modules if m.startswith(('pygls', 'lsprotocol'))),"
             " out.getvalue().decode(), (reader.readline() + reader.read(10 ** 6)).decode()]))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    request_id, loaded, answer, rest = json.loads(run.stdout)
    assert request_id == 3 and loaded == []
    assert json.loads(answer.split("\r\n\r\n", 1)[1])["result"]["serverInfo"]["name"] == "amplint"
    assert json.loads(rest.split("\r\n\r\n", 1)[1])["id"] == 3  # the request itself, for pygls


def test_the_server_starts_without_the_linter():
    """What `amplint server` loads before it can answer `initialize`: pygls and amplint.server, not the linter
    (the rules, libcst), which the worker loads after."""
    probe = ("import sys\nsys.argv = ['amplint', 'server']\nimport amplint.server, amplint.__main__\n"
             "print(sorted(m for m in sys.modules if m.startswith(('amplint.rules', 'amplint.pipeline', "
             "'amplint.engine', 'amplint.cli', 'libcst'))))")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_server_without_pygls_says_so_and_exits_2():
    code = ("import sys; sys.modules['pygls'] = None; sys.modules['lsprotocol'] = None; "
            "import amplint.server; sys.argv = ['amplint', 'server']; from amplint.cli import entry; entry()")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    assert 'pip install pygls' in result.stderr and not result.stdout


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


# Robustness: every request answered, bad input survived, linting off the event loop --------------------------
def _frame(message: dict, wrong_by: int = 0, header: bytes = b"Content-Length: %d") -> bytes:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8")
    if b"%d" in header:
        header = header % (len(body) + wrong_by)
    return header + b"\r\n\r\n" + body


def test_bad_frames_and_bad_requests_are_answered_and_survived(workspace):
    unknown = {"textDocument": {"uri": (workspace / "nowhere.py").as_uri()},
               "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
               "context": {"diagnostics": []}}

    def body(client: Client) -> None:
        client.initialize(workspace)

        def rejected(request_id: int, frame: bytes, reason: str) -> None:
            client.send_raw(frame)
            error = client.answer(request_id)["error"]
            assert error["code"] == -32600 and reason in error["message"], error

        def answered() -> None:  # the next request is read and served: the stream is in step again
            assert client.request("textDocument/codeAction", unknown) is None  # not an open document

        action = {"method": "textDocument/codeAction", "params": unknown}
        rejected(101, _frame({"id": 101, **action}, header=b"Content-Length: abc"), "invalid Content-Length")
        answered()
        rejected(102, _frame({"id": 102, **action}, header=b"Content-Type: application/json"),
                 "no Content-Length")
        answered()
        rejected(103, _frame({"id": 103, **action}, wrong_by=30) + _frame({"id": 104, **action}),
                 "does not match")  # a declared length that runs into the next message, which is kept
        assert client.answer(104)["result"] is None
        client.send_raw(_frame({"id": 105, **action}, wrong_by=-30))  # too short: unreadable, skipped
        answered()
        client.send_raw(b"Content-Length: 7\r\n\r\nnot json")
        answered()
        client.send_raw(_frame({"id": 106, **action}, header=b"content-length:%d"))  # lenient spelling
        assert client.answer(106)["result"] is None
        rejected(107, _frame({"id": 107, "method": "textDocument/codeAction", "params": {"textDocument": 5}}),
                 "invalid params")
        rejected(108, _frame({"jsonrpc": "1.0", "id": 108, **action}), "not a JSON-RPC 2.0 message")
        client.stop()

    _session(workspace, body)


_SLOW_SERVER = """
import faulthandler, multiprocessing, os, signal, sys, time
from amplint import server

# Module level: the linting worker imports this file too (as __mp_main__), and so lints with this hook.
marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "marks")
real = server.lint_document

def lint_document(text, path, root=None, buffers=None):
    if "explode" in text:
        raise TypeError("boom")
    if "segfault" in text and multiprocessing.parent_process() is not None:  # never the server itself
        faulthandler.disable()
        os.kill(os.getpid(), signal.SIGSEGV)
    with open(os.path.join(marks, "linted"), "a") as log:
        log.write(text.split("\\n", 1)[0] + "\\n")
    if "slow" in text:  # wait for the test to let it finish (bounded, in case the test dies)
        open(os.path.join(marks, "worker-%d" % os.getpid()), "w").close()
        started = time.monotonic()
        while not os.path.exists(os.path.join(marks, "release")) and time.monotonic() - started < 1800:
            time.sleep(0.01)
    return real(text, path, root, buffers)

server.lint_document = lint_document

if __name__ == "__main__":
    sys.argv = ["amplint", "server"]
    from amplint.cli import entry
    entry()
"""


def test_linting_is_off_the_event_loop_and_only_the_latest_version_is_published(workspace):
    marks = workspace / "marks"
    marks.mkdir()
    linted = marks / "linted"
    uri = (workspace / "plain" / "train.py").as_uri()
    nowhere = {"textDocument": {"uri": (workspace / "nowhere.py").as_uri()},
               "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
               "context": {"diagnostics": []}}

    def body(client: Client) -> None:
        client.initialize(workspace)
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "# v1 slow\n" + EXAMPLE}})
        deadline = time.monotonic() + TIMEOUT
        while not (linted.exists() and "# v1 slow" in linted.read_text()):
            assert time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.01)
        # the run is stuck: requests are still served
        assert client.request("textDocument/codeAction", nowhere) is None
        for version in (2, 3):
            client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": version},
                                                     "contentChanges": [{"text": f"# v{version}\n" + EXAMPLE}]})
        # the stuck run is stale: it is stopped (never released here), and the latest version is linted
        assert codes(client.wait_diagnostics(uri, 3)) == ["AMP001", "AMP003", "AMP004"]
        assert client.published_versions(uri) == [3]  # the stale first run was not published
        assert linted.read_text().splitlines() == ["# v1 slow", "# v3"]  # v2 was never linted

        # an error inside amplint is a message, the document gets no diagnostics, the server goes on
        broken = (workspace / "plain" / "broken.py").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": broken, "languageId": "python", "version": 1, "text": "# explode\n"}})
        assert client.wait_diagnostics(broken, 1)["diagnostics"] == []
        shown = [n["params"]["message"] for n in client.notifications if n["method"] == "window/showMessage"]
        assert any("internal error: TypeError: boom" in message for message in shown), shown
        assert not any("Error in server" in message for message in shown)
        actions = client.request("textDocument/codeAction", {**nowhere, "textDocument": {"uri": broken}})
        assert actions == []

        # a native crash while linting a document is that document's AMP902; the server and the next run live
        crashing = (workspace / "plain" / "crashing.py").as_uri()
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": crashing, "languageId": "python", "version": 1, "text": "# segfault\n"}})
        [crash] = client.wait_diagnostics(crashing, 1)["diagnostics"]
        assert crash["code"] == "AMP902" and "crashed" in crash["message"] and crash["severity"] == 1
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 4},
                                                 "contentChanges": [{"text": "# v4\n" + EXAMPLE}]})
        client.notify("textDocument/didSave", {"textDocument": {"uri": uri}})
        assert codes(client.wait_diagnostics(uri, 4)) == ["AMP001", "AMP003", "AMP004"]
        client.stop()

    script = workspace / "slow_server.py"
    script.write_text(_SLOW_SERVER)
    _session(workspace, body, [sys.executable, str(script)])


GOOD = _frame({"id": 7, "method": "shutdown", "params": None})


def _read_frames(data: bytes, check=None) -> list[dict]:
    """Every message a FrameReader hands on, read as pygls reads them (header lines, then the body)."""
    reader = FrameReader(io.BytesIO(data), check, log=io.StringIO())
    messages = []
    while True:
        header = reader.readline()
        if not header:
            return messages
        assert re.fullmatch(rb"Content-Length: (\d+)\r\n", header) and reader.readline() == b"\r\n"
        messages.append(json.loads(reader.read(int(header.split(b":")[1]))))


@pytest.mark.parametrize("junk", [
    b"Content-Length: -5\r\n\r\n{\"a\": [1, \"}\"]}", b"garbage\r\n\r\n", b"\r\n\r\n",
    b"Content-Length: 99999999999999\r\n\r\n{}", b"Content-Length: 3\r\n\r\n{\"x\": [1, 2]}",
    b"Content-Length: 2\r\n\r\nno", b"Content-Length: 4\r\n\r\n\xff\xfe{}",
])
def test_frame_reader_finds_the_next_message_after_junk(junk):
    assert _read_frames(junk + GOOD)[-1] == {"jsonrpc": "2.0", "id": 7, "method": "shutdown", "params": None}


def test_frame_reader_answers_what_pygls_would_drop():
    def check(message):
        if message["method"] == "refused":
            raise ValueError("no")

    requests = [_read_frames(_frame({"id": 1, "method": "refused", "params": {}}), check),
                _read_frames(_frame({"jsonrpc": "1.0", "id": "a", "method": "m"})),
                _read_frames(b"Content-Length: x\r\n\r\n" + json.dumps({"id": 2, "method": "m"}).encode())]
    assert [[(m["id"], m["method"], m["params"]["reason"]) for m in r] for r in requests] == [
        [(1, INVALID_MESSAGE, "refused: invalid params")],
        [("a", INVALID_MESSAGE, "m: not a JSON-RPC 2.0 message")],
        [(2, INVALID_MESSAGE, "m: invalid Content-Length header 'x'")]]
    notification = _frame({"method": "textDocument/didOpen", "params": {}}, header=b"Content-Length: x")
    assert _read_frames(notification + GOOD) == [json.loads(GOOD.split(b"\r\n\r\n")[1])]  # no id: skipped
    refused = _frame({"jsonrpc": "2.0", "method": "refused", "params": {}})  # a notification pygls cannot read
    assert _read_frames(refused + GOOD, check) == [json.loads(GOOD.split(b"\r\n\r\n")[1])]  # skipped, said


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.booleans())
def test_frame_reader_never_fails_on_random_bytes(data, with_header):
    prefix = b"Content-Length: 5\r\n\r\n" if with_header else b""
    for message in _read_frames(prefix + data):  # ends, without an exception
        assert isinstance(message, (dict, list))


def test_the_linting_worker_dies_with_the_server(workspace):
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to see the worker")
    marks = workspace / "marks"
    marks.mkdir()
    script = workspace / "slow_server.py"
    script.write_text(_SLOW_SERVER)
    uri = (workspace / "plain" / "train.py").as_uri()

    def body(client: Client) -> None:
        client.initialize(workspace)
        client.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "python", "version": 1, "text": "# slow\n" + EXAMPLE}})
        deadline = time.monotonic() + TIMEOUT
        while not list(marks.glob("worker-*")):
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.01)
        [worker] = [int(path.name.split("-")[1]) for path in marks.glob("worker-*")]
        client.process.kill()  # the editor goes, without a word
        client.process.wait(timeout=TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while process_runs(worker):
            assert time.monotonic() < deadline, "the linting worker outlived the server"
            time.sleep(0.05)

    try:
        _session(workspace, body, [sys.executable, str(script)])
    finally:
        (marks / "release").touch()


def test_positions_count_every_python_line_break():
    """LSP and Python both end a line at `\r\n`, `\r` or `\n`: amplint's row 3 is the editor's line 2."""
    text = "a = 1\rb = 2\r\nc = 3\n"
    assert Positions(text).at_location(Location(3, 1)) == (2, 0)
    assert Positions(text).at_offset(text.index("b")) == (1, 0)


def test_a_finding_can_depend_on_another_open_buffer(tmp_path, monkeypatch):
    """The lint worker keeps the project index: an unsaved buffer stands for its file, and a closed one goes back
    to what is on disk."""
    monkeypatch.setattr(server, "_WORKSPACE", None)
    engine = tmp_path / "engine.py"
    engine.write_text(
        "import torch\n\n\ndef train_one_epoch(model, optimizer, loader):\n"
        "    scaler = torch.amp.GradScaler('cuda')\n    for x in loader:\n"
        "        with torch.autocast('cuda'):\n            loss = model(x).mean()\n"
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n")
    main_py = tmp_path / "main.py"
    main_py.write_text("from engine import train_one_epoch\n\n\ndef main(m, o, data):\n    train_one_epoch(m, o, data)\n")
    looping = "from engine import train_one_epoch\n\n\ndef main(m, o, data):\n    for e in range(3):\n" \
              "        train_one_epoch(m, o, data)\n"

    def codes(buffers):
        return [d.code for d in server.lint_document(engine.read_text(), str(engine), str(tmp_path), buffers)]

    assert codes({}) == []  # main.py on disk calls it once
    assert codes({str(main_py): looping}) == ["AMP004"]  # the unsaved buffer loops
    assert codes({}) == []  # closed unsaved: the file on disk again


def test_frame_reader_takes_a_batch_apart_and_skips_what_is_no_object():
    """pygls reads one JSON object per frame and fails with a traceback, answering nothing, on an array (a
    JSON-RPC batch) or a bare value: a batch's requests are handed on one by one, other values skipped."""
    first, second = {"jsonrpc": "2.0", "id": 1, "method": "a"}, {"jsonrpc": "2.0", "id": 2, "method": "b"}
    batch = json.dumps([first, 5, second]).encode()
    assert _read_frames(b"Content-Length: %d\r\n\r\n" % len(batch) + batch + GOOD)[:2] == [first, second]
    for value in (b"[]", b"5", b'"text"', b"null", b"[[1]]"):
        assert _read_frames(b"Content-Length: %d\r\n\r\n" % len(value) + value + GOOD) == [
            json.loads(GOOD.split(b"\r\n\r\n")[1])], value


def test_unreadable_messages_are_answered_or_skipped_in_one_line_of_log(workspace):
    """A notification or a request whose params pygls cannot read: the request is answered with an error, the
    notification skipped, each said in one line on stderr; pygls's tracebacks for them are kept out of the log."""
    def body(client: Client) -> None:
        client.initialize(workspace)
        client.notify("textDocument/didOpen", {"textDocument": 5})
        bad_range = {"start": {"line": 0, "character": 0}, "end": {"line": -1, "character": 0}}
        client.notify("textDocument/didChange", {"textDocument": {"uri": "file:///x.py", "version": 2},
                                                 "contentChanges": [{"range": bad_range, "text": "x"}]})
        answer = client.call("textDocument/codeAction", {"textDocument": None})
        assert answer["error"]["code"] == -32600 and "invalid params" in answer["error"]["message"]
        client.stop()

    _session(workspace, body)
    log = (workspace / "server.log").read_text()
    assert "Traceback" not in log, log
    assert log.count("skipped a message without a request id") == 2, log


def test_exit_without_shutdown_ends_the_process_with_1(workspace):
    """The LSP specification: `exit` ends the server with 0 after `shutdown`, 1 without it (a client that died)."""
    client = Client(workspace, subprocess.DEVNULL)
    client.initialize(workspace)
    client.notify("exit", None)
    assert client.process.wait(timeout=TIMEOUT) == 1


def test_a_document_is_linted_with_its_projects_configuration_and_torch_range(tmp_path):
    """The command line's answer for the file (tests/test_config_lookup.py has all three front ends)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "requirements.txt").write_text("torch>=1.13,<2\n", encoding="utf-8")  # no supported torch warns
    legacy = tmp_path / "pkg" / "legacy.py"
    legacy.parent.mkdir()
    text = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
    legacy.write_text(text, encoding="utf-8")
    assert server.lint_document(text, str(legacy), str(tmp_path)) == []
    (tmp_path / "requirements.txt").write_text("torch>=1.13\n", encoding="utf-8")
    assert [d.code for d in server.lint_document(text, str(legacy), str(tmp_path))] == ["AMP007"]
