"""What real training code hides behind calls: autocast regions made by functions, objects that train, helpers
across modules, module names as Python resolves them. Each test states one fact of the model below the rules
(facts, index); the fixtures (fixtures/AMP*/) hold the rules' findings."""

from __future__ import annotations

import textwrap
from pathlib import Path

from amplint.diagnostics import Applicability
from amplint.engine import lint_text
from amplint.facts import ModuleFacts, RegionState
from amplint.index.build import build_index
from amplint.index.functions import index_text
from amplint.index.project import module_name
from amplint.lazy import libcst as cst
from amplint.rules import RULES_BY_CODE
from amplint.vocabulary import Effect


def facts_of(text: str) -> ModuleFacts:
    text = textwrap.dedent(text)
    return ModuleFacts(cst.parse_module(text), text)


def region_at(facts: ModuleFacts, method: str):
    call = next(call for call in facts.calls if call.method == method)
    return facts.effective_region(call.frame)[0]


FACTORIES = """
    import contextlib
    from contextlib import ExitStack

    import torch


    def make_ctx():
        return torch.autocast("cuda", dtype=torch.bfloat16)


    @contextlib.contextmanager
    def amp_ctx():
        with torch.autocast("cuda", dtype=torch.float16):
            yield


    def no_region():
        return torch.no_grad()


    def by_call(loss):
        with make_ctx():
            loss.backward()


    def by_name(loss):
        ctx = make_ctx()
        with ctx:
            loss.mean()


    def by_generator(loss):
        with amp_ctx():
            loss.sum()


    def by_stack(loss):
        with ExitStack() as stack:
            stack.enter_context(torch.autocast("cuda"))
            loss.item()


    def lookalike(loss):
        with no_region():
            loss.tolist()
"""


def test_regions_made_by_functions_of_the_module():
    facts = facts_of(FACTORIES)
    made = region_at(facts, "backward")
    assert made.state is RegionState.ON and made.dtype == "bfloat16" and made.factory_plain
    assert "make_ctx" in made.factory
    held = region_at(facts, "mean")
    assert held.state is RegionState.ON and held.factory is not None
    generator = region_at(facts, "sum")
    assert generator.dtype == "float16" and not generator.factory_plain  # code after the yield runs at exit
    stacked = region_at(facts, "item")
    assert stacked.via == "exitstack" and stacked.state is RegionState.ON
    assert region_at(facts, "tolist") is None


def test_index_knows_a_factory_by_what_it_returns():
    record = index_text(textwrap.dedent(FACTORIES))
    doing = {name for name, summary in record.functions.items() if Effect.RETURNS_AUTOCAST in summary.does}
    assert doing == {"make_ctx", "amp_ctx"}


def fixes(text: str, code: str = "AMP001") -> list:
    result = lint_text(textwrap.dedent(text), "t.py", [RULES_BY_CODE[code]()])
    return [d.fix.applicability if d.fix else None for d in result.diagnostics]


def test_a_fix_through_a_factory_is_safe_only_for_a_plain_one_not_reopened():
    plain = """
        import torch

        def make_ctx():
            return torch.autocast("cuda", dtype=torch.bfloat16)

        def train(model, x, optimizer):
            with make_ctx():
                loss = model(x).sum()
                loss.backward()
            optimizer.step()
    """
    assert fixes(plain) == [Applicability.SAFE]
    reopened = plain.replace("loss.backward()\n", "loss.backward()\n                model(x)\n")
    assert fixes(reopened) == [Applicability.UNSAFE]
    generator = """
        import contextlib
        import torch

        @contextlib.contextmanager
        def make_ctx():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                yield

        def train(model, x, optimizer):
            with make_ctx():
                loss = model(x).sum()
                loss.backward()
            optimizer.step()
    """
    assert fixes(generator) == [Applicability.UNSAFE]


def test_an_annotation_is_a_hint_for_the_method_a_call_runs():
    record = index_text(textwrap.dedent("""
        class Trainer:
            model: "Model"

            def __init__(self, net: Net, other):
                self.net = net
                self.other = other

        def run(model: Model, scaler: torch.amp.GradScaler, maybe: Optional[Model]):
            model.optimize()
    """))
    assert record.instances["run:model"] == "Model"
    assert record.instances["Trainer.net"] == "Net" and record.instances["Trainer.model"] == "Model"
    assert "run:maybe" not in record.instances and "Trainer.other" not in record.instances


def test_a_conditional_scaler_returned_is_kept():
    record = index_text(textwrap.dedent("""
        import torch

        def build(use_bf16):
            scaler = torch.amp.GradScaler("cuda") if use_bf16 else None
            return scaler
    """))
    assert {Effect.BUILDS_SCALER, Effect.KEEPS_SCALER} <= record.functions["build"].does


def test_an_element_known_as_an_optimizer_steps_as_one():
    facts = facts_of("""
        import torch

        class T:
            def __init__(self, model):
                self.optimizer = [torch.optim.SGD(model.parameters(), lr=0.1)]
                self.others = [make()]

            def step(self):
                self.optimizer[0].step()
                self.others[0].step()
                self.others[1].zero_grad()
                self.others[1].step()
    """)
    steps = [e.optimizer for e in facts.events if e.kind == Effect.OPTIMIZER_STEP]
    assert steps == ["self.optimizer[0]", "self.others[1]"]


def test_another_functions_own_scaler_is_another_object():
    facts = facts_of("""
        import torch

        def steps(scaler, optimizer):
            scaler.step(optimizer)

        def own(optimizer):
            scaler = torch.amp.GradScaler("cuda")
            scaler.step(optimizer)
            scaler.update()

        def handed(optimizer):
            scaler = torch.amp.GradScaler("cuda")
            steps(scaler, optimizer)
            scaler.update()
    """)
    function = next(info.frame for info in facts.functions if info.qualname == "steps")
    own = next(info.frame for info in facts.functions if info.qualname == "own")
    handed = next(info.frame for info in facts.functions if info.qualname == "handed")
    assert facts.own_local_scaler("scaler", own) and not facts.own_local_scaler("scaler", handed)
    assert facts.updated_elsewhere("scaler", function)  # `handed` updates the scaler it hands to `steps`


def test_a_folder_without_init_inside_a_package_is_a_namespace_package(tmp_path: Path):
    (tmp_path / "root" / "models").mkdir(parents=True)
    (tmp_path / "root" / "__init__.py").write_text("")
    (tmp_path / "loose").mkdir()
    assert module_name(str(tmp_path / "root" / "models" / "net.py")) == "root.models.net"
    assert module_name(str(tmp_path / "loose" / "net.py")) == "net"


def test_a_star_import_binds_what_the_project_module_imports(tmp_path: Path):
    (tmp_path / "common.py").write_text("import torch\nimport torch.nn as nn\nfrom torch import autocast as _ac\n")
    train = "from common import *\n\nwith torch.autocast('cpu'):\n    nn.Linear(2, 2)\n"
    (tmp_path / "train.py").write_text(train)
    paths = [str(tmp_path / "common.py"), str(tmp_path / "train.py")]
    project = build_index(paths, lambda path: Path(path).read_text())
    facts = ModuleFacts(cst.parse_module(train), train, project.view(paths[1]))
    assert facts.imports.bindings["torch"] == "torch" and facts.imports.bindings["nn"] == "torch.nn"
    assert "_ac" not in facts.imports.bindings  # a private name is not exported by `*`
    assert facts.region_of(next(c for c in facts.calls if c.dotted == "nn.Linear").frame) is not None
