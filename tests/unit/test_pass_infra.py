"""Pass infrastructure: typed options, the pipeline grammar, the registry and the PassManager."""

from __future__ import annotations

import dataclasses
import io
import itertools
from typing import ClassVar, Literal

import numpy as np
import pytest

from graphir.errors import GraphIRError, PassError, PassOptionError, PreconditionError, VerifyError
from graphir.ir import Module
from graphir.pass_infra import (
    FACT_CHECKS,
    Pass,
    PassContext,
    PassResult,
    fact_holds,
    pass_options,
    providers_of,
    register_pass,
)
from graphir.pass_manager import PassManager
from graphir.pipeline import parse_pipeline, parse_pipeline_text

_unique = itertools.count()


def unique(prefix: str) -> str:
    """A pass or fact name no other test uses (the registry is global)."""
    return f"{prefix}-{next(_unique)}"


@dataclasses.dataclass(frozen=True)
class OptionsPass(Pass):
    """Every supported option type."""

    name: ClassVar[str] = "test-options"
    count: int = 3
    ratio: float = 0.5
    flag: bool = False
    label: str = "x"
    sizes: tuple[int, ...] = ()
    tags: tuple[str, ...] = ("a",)
    algo: Literal["fast", "exact"] = "fast"
    limit: int | None = None
    maybe_algo: Literal["p", "q"] | None = "p"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        return PassResult()


@pytest.fixture
def options_pass(isolated_registry):
    register_pass(OptionsPass)
    return OptionsPass


# ----------------------------------------------------------------------------- options


def test_option_table_types_and_defaults(options_pass):
    options = pass_options(options_pass)
    shown = {name: (info.field, info.type_text, info.default) for name, info in options.items()}
    assert shown == {
        "count": ("count", "int", 3),
        "ratio": ("ratio", "float", 0.5),
        "flag": ("flag", "bool", False),
        "label": ("label", "str", "x"),
        "sizes": ("sizes", "list<int>", ()),
        "tags": ("tags", "list<str>", ("a",)),
        "algo": ("algo", "fast|exact", "fast"),
        "limit": ("limit", "int?", None),
        "maybe-algo": ("maybe_algo", "p|q?", "p"),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("count=7", {"count": 7}),
        ("count=-2", {"count": -2}),
        ("count=0x10", {"count": 16}),
        ("ratio=2.5e-3", {"ratio": 2.5e-3}),
        ("ratio=3", {"ratio": 3.0}),
        ("flag=true", {"flag": True}),
        ("flag=on", {"flag": True}),
        ("flag=0", {"flag": False}),
        ("flag=False", {"flag": False}),
        ("label=hello", {"label": "hello"}),
        ('label="a b, {c}=d"', {"label": "a b, {c}=d"}),
        ('label="say \\"hi\\""', {"label": 'say "hi"'}),
        ('label=""', {"label": ""}),
        ("sizes=1,2,3", {"sizes": (1, 2, 3)}),
        ("sizes=4", {"sizes": (4,)}),
        ('tags=x,"y z",w', {"tags": ("x", "y z", "w")}),
        ("algo=exact", {"algo": "exact"}),
        ("limit=5", {"limit": 5}),
        ("limit=none", {"limit": None}),
        ("maybe-algo=None", {"maybe_algo": None}),
        ("maybe-algo=q", {"maybe_algo": "q"}),
        ("count=1 ratio=1.5 flag=yes", {"count": 1, "ratio": 1.5, "flag": True}),
    ],
)
def test_option_conversion(options_pass, text, expected):
    (instance,) = parse_pipeline(f"test-options{{{text}}}")
    assert isinstance(instance, options_pass)
    for field, value in expected.items():
        got = getattr(instance, field)
        assert got == value and type(got) is type(value), (field, got)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("count=abc", "bad value 'abc' for option 'count' of pass 'test-options' (int)"),
        ("count=1.5", "(int)"),
        ("count=1,2", "expected a single value, not a list"),
        ("ratio=fast", "(float)"),
        ("flag=maybe", "expected true or false"),
        (
            "algo=slow",
            "bad value 'slow' for option 'algo' of pass 'test-options' (fast|exact): expected one of fast, exact",
        ),
        ("sizes=1,x", "bad value '1,x' for option 'sizes' of pass 'test-options' (list<int>)"),
        ("limit=lots", "(int?)"),
    ],
)
def test_option_conversion_errors(options_pass, text, fragment):
    pipeline = f"dce,test-options{{{text}}}"
    with pytest.raises(PassOptionError) as info:
        parse_pipeline(pipeline)
    exc = info.value
    assert fragment in exc.message
    value_start = pipeline.index("=", pipeline.index("{")) + 1
    assert (exc.loc.line, exc.loc.col) == (1, value_start + 1)
    assert exc.loc.source_line == pipeline


def test_unsupported_option_type_fails_at_registration(isolated_registry):
    @dataclasses.dataclass(frozen=True)
    class BadOption(Pass):
        name: ClassVar[str] = unique("test-bad-option")
        table: dict = dataclasses.field(default_factory=dict)

    with pytest.raises(TypeError, match="unsupported option type"):
        register_pass(BadOption)
    assert BadOption.name not in isolated_registry


# ----------------------------------------------------------------------------- pipeline grammar


def test_pipeline_text_structure():
    entries = parse_pipeline_text(' a , b{k=v list=x,"y, z" q="s p"} ,c{} ')
    assert [e.name for e in entries] == ["a", "b", "c"]
    options = {o.key: o.value for o in entries[1].options}
    assert options == {"k": "v", "list": ["x", "y, z"], "q": "s p"}
    assert entries[2].options == ()
    assert entries[1].col == 5 and entries[1].options[0].key_col == 7  # 0-based offsets
    assert parse_pipeline_text("") == [] and parse_pipeline_text("   ") == []


@pytest.mark.parametrize(
    ("text", "col", "fragment"),
    [
        ("dce,,dce", 5, "expected a pass name"),
        ("dce dce", 5, "expected ',' between passes"),
        ("dce{keep=a", 4, "missing '}' closing the options of 'dce'"),
        ("dce{keep}", 9, "expected '=' after option 'keep'"),
        ('dce{keep="abc}', 10, "unterminated string"),
        ("dce{keep=}", 10, "expected an option value"),
        ("dce{keep=a keep=b}", 12, "option 'keep' given twice for 'dce'"),
        ("dce,", 5, "expected a pass name, found end of pipeline"),
    ],
)
def test_pipeline_syntax_errors(text, col, fragment):
    with pytest.raises(PassOptionError) as info:
        parse_pipeline(text)
    assert fragment in info.value.message
    assert info.value.loc.col == col, info.value.render()
    rendered = info.value.render().splitlines()
    assert rendered[1] == text and rendered[2] == " " * (col - 1) + "^"


def test_unknown_pass_lists_known_passes():
    with pytest.raises(PassOptionError) as info:
        parse_pipeline("dce,no-such-pass{x=1}")
    assert info.value.message.startswith("unknown pass 'no-such-pass' (known passes: ")
    assert "critical-path" in info.value.message and "dce" in info.value.message
    assert info.value.loc.col == 5


def test_unknown_option_lists_valid_options():
    with pytest.raises(PassOptionError) as info:
        parse_pipeline("dce{keep=a prune=false}")
    assert info.value.message == "unknown option 'prune' for pass 'dce' (options: keep, prune-constants)"
    assert info.value.loc.col == 12


def test_kebab_options_map_to_snake_fields():
    (dce,) = parse_pipeline("dce{prune-constants=false keep=tf.Assign,tf.Print}")
    assert dce.prune_constants is False and dce.keep == ("tf.Assign", "tf.Print")
    with pytest.raises(PassOptionError, match="unknown option 'prune_constants'"):
        parse_pipeline("dce{prune_constants=false}")


# ----------------------------------------------------------------------------- spec()


def test_spec_prints_only_non_default_options(options_pass):
    assert OptionsPass().spec() == "test-options"
    assert OptionsPass(count=4, flag=True).spec() == "test-options{count=4 flag=true}"


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"count": -4, "ratio": 1e-6, "flag": True},
        {"label": 'with space, comma {brace} = "quote" \\ back'},
        {"label": ""},
        {"sizes": (1, 2), "tags": ("x,y", "z")},
        {"tags": ("one",)},
        {"algo": "exact", "limit": 0, "maybe_algo": None},
        {"ratio": float("inf")},
    ],
)
def test_spec_reparses_to_an_equal_pass(options_pass, kwargs):
    original = OptionsPass(**kwargs)
    (again,) = parse_pipeline(original.spec())
    assert again == original, original.spec()


@pytest.mark.parametrize("kwargs", [{"tags": ()}, {"label": "tab\there"}])
def test_spec_reparses_edge_values(options_pass, kwargs):
    original = OptionsPass(**kwargs)
    (again,) = parse_pipeline(original.spec())
    assert again == original


def test_whole_pipeline_round_trips_through_specs():
    text = "dce{keep=a,b prune-constants=false},strip-annotations{keys=device},critical-path{kind=V100}"
    passes = parse_pipeline(text)
    assert ",".join(p.spec() for p in passes) == text
    assert parse_pipeline(",".join(p.spec() for p in passes)) == passes


# ----------------------------------------------------------------------------- registry


def test_registry_name_clash(isolated_registry):
    @dataclasses.dataclass(frozen=True)
    class AnotherDce(Pass):
        name: ClassVar[str] = "dce"

    with pytest.raises(TypeError, match="pass name 'dce' is already taken by graphir.passes.dce.DeadCodeElimination"):
        register_pass(AnotherDce)
    assert isolated_registry["dce"].__name__ == "DeadCodeElimination"


def test_registry_requires_a_name(isolated_registry):
    @dataclasses.dataclass(frozen=True)
    class Nameless(Pass):
        pass

    with pytest.raises(TypeError, match="has no 'name'"):
        register_pass(Nameless)


def test_registration_is_idempotent_for_the_same_class(options_pass):
    assert register_pass(OptionsPass) is OptionsPass


# ----------------------------------------------------------------------------- the pass manager


def _flag_fact(fact: str) -> None:
    """A fact that holds when the module metadata has the key ``fact``."""
    FACT_CHECKS[fact] = lambda module: fact in module.metadata


def _make_provider(fact: str, *, requires: tuple[str, ...] = (), really_provides: bool = True):
    @dataclasses.dataclass(frozen=True)
    class Provider(Pass):
        name: ClassVar[str] = unique("test-provide")
        provides: ClassVar[tuple[str, ...]] = (fact,)
        value: int = 1

        def run(self, module: Module, ctx: PassContext) -> PassResult:
            if really_provides:
                module.metadata[fact] = self.value
            return PassResult(True, {"provided": 1})

    Provider.requires = requires
    return register_pass(Provider)


def _make_consumer(fact: str):
    @dataclasses.dataclass(frozen=True)
    class Consumer(Pass):
        name: ClassVar[str] = unique("test-consume")
        requires: ClassVar[tuple[str, ...]] = (fact,)

        def run(self, module: Module, ctx: PassContext) -> PassResult:
            assert fact_holds(module, fact)
            return PassResult(False, {"seen": module.metadata[fact]})

    return register_pass(Consumer)


def test_missing_fact_is_provided_automatically(isolated_registry, chain):
    module, *_ = chain
    fact = unique("fact")
    _flag_fact(fact)
    provider = _make_provider(fact)
    consumer = _make_consumer(fact)
    assert providers_of(fact) == [provider]
    log = io.StringIO()
    records = PassManager([consumer()]).run(module, PassContext(verbose=True, log_stream=log))
    assert [(type(r.pass_), r.auto) for r in records] == [(provider, True), (consumer, False)]
    assert records[1].result.stats == {"seen": 1}
    assert f"running '{provider.name}' to provide '{fact}' required by '{consumer.name}'" in log.getvalue()
    # Already present: the provider does not run again.
    records = PassManager([consumer()]).run(module)
    assert [type(r.pass_) for r in records] == [consumer]


def test_providers_chain(isolated_registry, chain):
    module, *_ = chain
    base, derived = unique("fact"), unique("fact")
    _flag_fact(base)
    _flag_fact(derived)
    first = _make_provider(base)
    second = _make_provider(derived, requires=(base,))
    consumer = _make_consumer(derived)
    manager = PassManager([consumer()])
    manager.run(module)
    assert [type(r.pass_) for r in manager.records] == [first, second, consumer]
    assert "(auto: prerequisite)" in manager.timing_report()
    assert f"{second.name}.provided = 1" in manager.stats_report()


def test_missing_fact_without_provider(isolated_registry, chain):
    module, *_ = chain
    fact = unique("fact")
    _flag_fact(fact)
    consumer = _make_consumer(fact)
    with pytest.raises(PreconditionError) as info:
        PassManager([consumer()]).run(module)
    assert info.value.message == (
        f"pass '{consumer.name}' requires '{fact}', which the module lacks; no registered pass provides it"
    )


def test_missing_fact_with_auto_run_disabled_names_the_provider(isolated_registry, chain):
    module, *_ = chain
    fact = unique("fact")
    _flag_fact(fact)
    provider = _make_provider(fact)
    consumer = _make_consumer(fact)
    with pytest.raises(PreconditionError, match=f"; run '{provider.name}' first"):
        PassManager([consumer()], auto_prerequisites=False).run(module)


def test_provider_that_does_not_provide(isolated_registry, chain):
    module, *_ = chain
    fact = unique("fact")
    _flag_fact(fact)
    provider = _make_provider(fact, really_provides=False)
    consumer = _make_consumer(fact)
    with pytest.raises(PreconditionError, match=f"pass '{provider.name}' ran but did not provide '{fact}'"):
        PassManager([consumer()]).run(module)


def test_annotation_fact_default_check(chain):
    module, a, b, c = chain
    assert not fact_holds(module, "cost")
    a.cost = b.cost = 1.0
    assert not fact_holds(module, "cost")
    c.cost = 2.0
    assert fact_holds(module, "cost")


@dataclasses.dataclass(frozen=True)
class _Failing(Pass):
    name: ClassVar[str] = "test-failing"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        raise PassError("budget of 3 bytes is impossible")


def test_pass_failure_names_earlier_passes(chain):
    module, *_ = chain
    passes = parse_pipeline("strip-annotations,dce") + [_Failing()]
    with pytest.raises(PassError) as info:
        PassManager(passes).run(module)
    assert info.value.message == (
        "pass 'test-failing' failed after 'strip-annotations', 'dce': budget of 3 bytes is impossible"
    )
    with pytest.raises(PassError, match="pass 'test-failing' failed as the first pass: budget"):
        PassManager([_Failing()]).run(module)


def test_graphir_errors_from_passes_are_wrapped_once(chain):
    module, *_ = chain
    with pytest.raises(PassError) as info:
        PassManager([_FailsWithUserError()]).run(module)
    assert info.value.message.startswith("pass 'test-fails' failed as the first pass: bad budget")
    assert info.value.message.count("failed") == 1
    assert isinstance(info.value, GraphIRError)


@dataclasses.dataclass(frozen=True)
class _FailsWithUserError(Pass):
    """Fails the way a pass fails on valid input it cannot handle."""

    name: ClassVar[str] = "test-fails"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        raise PassError("bad budget")


@dataclasses.dataclass(frozen=True)
class _MakeCycle(Pass):
    """Deliberately broken: rewires the first node to consume the last one."""

    name: ClassVar[str] = "test-make-cycle"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        nodes = list(module.graph.nodes)
        nodes[0].set_input(0, nodes[-1].outputs[0])
        return PassResult(True)


def test_verification_after_each_pass_catches_a_broken_pass(chain):
    module, *_ = chain
    with pytest.raises(VerifyError) as info:
        PassManager(parse_pipeline("dce") + [_MakeCycle()]).run(module)
    message = info.value.message
    assert message.startswith("verification failed after pass 'test-make-cycle': graph 'main' has a cycle: ")
    assert "a -> b -> c -> a" in message


def test_verification_can_be_disabled(chain):
    module, *_ = chain
    records = PassManager([_MakeCycle()], verify_each=False).run(module)
    assert len(records) == 1


def test_invalid_input_is_reported_before_any_pass(chain):
    module, a, *_ = chain
    a.device = "tpu9"
    with pytest.raises(VerifyError) as info:
        PassManager(parse_pipeline("dce")).run(module)
    assert "after pass" not in info.value.message and "unknown device 'tpu9'" in info.value.message


def test_print_ir_after(chain):
    module, *_ = chain
    stream = io.StringIO()
    PassManager(
        parse_pipeline("dce,strip-annotations{keys=cost}"), print_ir_after={"strip-annotations"}, ir_stream=stream
    ).run(module)
    text = stream.getvalue()
    assert text.startswith("// -----// IR after strip-annotations{keys=cost} //----- //\nmodule @m")
    assert text.count("// -----// IR after") == 1
    stream = io.StringIO()
    PassManager(parse_pipeline("dce,dce"), print_ir_after_all=True, ir_stream=stream).run(module)
    assert stream.getvalue().count("// -----// IR after dce //----- //") == 2


@dataclasses.dataclass(frozen=True)
class _Draw(Pass):
    name: ClassVar[str] = "test-draw"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        return PassResult(False, {"draw": float(ctx.rng().random())})


def _draws(seed: int, passes: int = 2) -> list[float]:
    manager = PassManager([_Draw() for _ in range(passes)], verify_each=False)
    manager.run(Module("m", __import__("graphir").Graph()), PassContext(seed=seed))
    return [float(r.result.stats["draw"]) for r in manager.records]


def test_rng_is_deterministic_per_seed_and_position():
    first = _draws(7)
    assert first == _draws(7)
    assert first != _draws(8)
    assert first[0] != first[1]  # each pass position has its own stream
    assert PassContext(seed=3, pass_position=1).rng().integers(1 << 30) == PassContext(
        seed=3, pass_position=1
    ).rng().integers(1 << 30)
    assert isinstance(PassContext().rng(), np.random.Generator)


def test_registry_clash_with_same_class_name_from_another_module(isolated_registry):
    impostor = type("DeadCodeElimination", (Pass,), {"name": "dce", "__module__": "some_plugin.passes"})
    impostor = dataclasses.dataclass(frozen=True)(impostor)
    with pytest.raises(TypeError, match="already taken"):
        register_pass(impostor)
    assert isolated_registry["dce"].__module__ == "graphir.passes.dce"


@dataclasses.dataclass(frozen=True)
class _FailingMentioningAPass(Pass):
    name: ClassVar[str] = "test-failing-2"

    def run(self, module: Module, ctx: PassContext) -> PassResult:
        raise PassError("option of pass 'x' is out of range")


def test_pass_failure_is_wrapped_even_if_its_message_mentions_a_pass(chain):
    module, *_ = chain
    with pytest.raises(PassError) as info:
        PassManager(parse_pipeline("dce") + [_FailingMentioningAPass()]).run(module)
    assert info.value.message.startswith("pass 'test-failing-2' failed after 'dce': ")


# --------------------------------------------------------------------------- algorithm sub-registries


def test_place_options_belong_to_the_chosen_placer() -> None:
    from graphir.errors import PassOptionError
    from graphir.passes.place import Place
    from graphir.passes.place.ilp import Ilp
    from graphir.pipeline import parse_pipeline

    (place,) = parse_pipeline("place{algo=ilp time-limit=30 workers=2}")
    assert place == Place("ilp", Ilp(time_limit=30.0, workers=2))
    assert place.spec() == "place{algo=ilp time-limit=30.0 workers=2}"
    assert parse_pipeline(place.spec()) == [place]
    assert parse_pipeline("place")[0].spec() == "place"
    with pytest.raises(PassOptionError) as caught:
        parse_pipeline("profile,place{algo=heft time-limit=5}")
    message = (
        "unknown option 'time-limit' for place{algo=heft} "
        "(heft options: mem-model, plan-congestion; place options: algo, gradients)"
    )
    assert str(caught.value).startswith(f"<pipeline>:1:25: error: {message}")  # the caret under time-limit
    with pytest.raises(PassOptionError, match=r"1:12: error: unknown placement algorithm 'nope' for pass 'place'"):
        parse_pipeline("place{algo=nope}")
    with pytest.raises(PassOptionError, match=r"bad value 'x' for option 'workers'"):
        parse_pipeline("place{algo=ilp workers=x}")
