"""One question's run through the answer stages (query/answer/run.py), without services.

The chat model is a fake provider completion, the embedder is unavailable (the extractive
generator answers without its sentence ranker): what is checked is how the stages use the run,
that the generator is resolved once per question whatever stages ask for it, that the extractive
generator answers through the same interface as a chat model, and that every text ragline writes
itself is in the question's language.
"""

from __future__ import annotations

import pytest

from ragline.query.answer import generate, texts
from ragline.query.answer.generate import AnswerGenerator, ChatGenerator, ExtractiveGenerator, resolve
from ragline.query.answer.run import QuestionRun, Refused, citations_stage, judge_of, links_stage, respond
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import providers
from ragline.shared.worker.providers import Generation

RU_DOC = "Клиент повторяет запрос после ошибки 429 с паузой из заголовка Retry-After."
EN_DOC = "The client retries a request after error 429, waiting as long as the Retry-After header says."
RU_QUESTION = "Сколько ждёт клиент после ошибки 429?"
EN_QUESTION = "How long does the client wait after error 429?"


class FakeChat:
    """A provider completion answering from a script, counting its calls."""

    name = "anthropic"

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0

    def generate(self, system: str, messages: list[dict], max_tokens: int | None = None) -> Generation:
        self.calls += 1
        answer = self.answers[min(self.calls, len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return Generation(answer, 10, 5)


@pytest.fixture()
def no_embedder(monkeypatch):
    def unavailable():
        raise RuntimeError("no embedder in unit tests")

    monkeypatch.setattr(providers, "get_embedder", unavailable)


@pytest.fixture()
def generator(monkeypatch, no_embedder):
    """``generator(x)``: the provider factory answers ``x`` (a completion, None, or an exception it
    raises); returns the list of its calls' results."""
    built: list[object] = []

    def use(made: object) -> list[object]:
        def get_generator():
            built.append(made)
            if isinstance(made, Exception):
                raise made
            return made

        monkeypatch.setattr(providers, "get_generator", get_generator)
        return built

    return use


def settings(**answer: object) -> Settings:
    return Settings(answer={"grounding": "off", "min_confidence": 0.0, **answer})


def hits(text: str, n: int = 2) -> list[Hit]:
    return [
        Hit(doc_id=f"d{i}", chunk_no=0, path=f"d{i}.md", content=text, score=1.0 - i / 10) for i in range(n)
    ]


def test_the_generator_is_resolved_once_per_question_whatever_the_stages_ask(generator):
    chat = FakeChat("Клиент ждёт столько, сколько говорит Retry-After [1].")
    built = generator(chat)
    run = QuestionRun.start(RU_QUESTION, settings(provider="anthropic", self_consistency=3))
    assert run.chat_model("router") is chat and run.chat_model("transform") is chat
    resp = respond(run, hits(RU_DOC))
    assert not resp.no_answer and chat.calls == 3  # the answer and two self-consistency samples
    assert resp.trace["self_consistency"]["samples"] == 3
    assert len(built) == 1


@pytest.mark.parametrize(
    "made", [None, ValueError("no key")], ids=["extractive configured", "chat model broken"]
)
def test_the_extractive_generator_answers_through_the_same_interface(generator, made):
    generator(made)
    answerer, error = resolve(settings())
    assert isinstance(answerer, ExtractiveGenerator) and isinstance(answerer, AnswerGenerator)
    assert answerer.completion is None and answerer.name == "extractive"
    assert (error is None) == (made is None)
    out = answerer.answer(RU_QUESTION, hits(RU_DOC))
    assert out.extract is not None and "429" in out.text and out.info == {"generator": "extractive"}


def test_a_chat_model_is_an_answer_generator_too(generator):
    generator(FakeChat("Столько, сколько говорит Retry-After [1]."))
    answerer, error = resolve(settings(provider="anthropic"))
    assert isinstance(answerer, ChatGenerator) and error is None
    out = answerer.answer(RU_QUESTION, hits(RU_DOC))
    assert out.text.endswith("[1].") and out.extract is None
    assert out.info == {"generator": "anthropic", "input_tokens": 10, "output_tokens": 5}


def test_a_failing_chat_model_gives_the_extractive_answer_and_says_why(generator):
    generator(FakeChat(RuntimeError("down")))
    run = QuestionRun.start(RU_QUESTION, settings(provider="anthropic"))
    resp = respond(run, hits(RU_DOC))
    assert resp.degraded_reasons == ["generator: RuntimeError"]
    assert resp.trace["generator"] == {"generator": "extractive"} and "extractive" in resp.trace
    assert not resp.no_answer and "429" in resp.answer


def test_a_chat_model_that_cannot_be_built_is_named_by_every_stage_that_wanted_it(generator):
    generator(ValueError("no key"))
    run = QuestionRun.start(RU_QUESTION, settings(provider="anthropic"))
    assert run.chat is None and run.chat_model("router") is None
    resp = respond(run, hits(RU_DOC))
    assert resp.degraded_reasons == ["router: ValueError", "generator: ValueError: no key"]
    assert not resp.no_answer


@pytest.mark.parametrize(
    ("question", "lang"), [(RU_QUESTION, "ru"), (EN_QUESTION, "en")], ids=["russian", "english"]
)
def test_every_refusal_is_in_the_question_language(generator, question, lang):
    generator(None)
    empty = respond(QuestionRun.start(question, settings()), [])
    assert empty.no_answer and empty.answer == texts.say("no_answer", lang)
    assert empty.reason == "no document passed the relevance threshold"

    generator(FakeChat("Ответ без ссылок."))
    uncited = respond(QuestionRun.start(question, settings(provider="anthropic")), hits(RU_DOC))
    assert uncited.answer == texts.say("rejected", lang, why="the answer cites no document")

    generator(FakeChat(texts.NO_ANSWER_MARK))  # the prompt's refusal, echoed by the model
    refused = respond(QuestionRun.start(question, settings(provider="anthropic")), hits(RU_DOC))
    assert (
        refused.answer == texts.say("no_answer", lang) and refused.reason == "the generator found no answer"
    )


def test_a_stage_that_refuses_raises_and_records_why(generator):
    generator(None)
    run = QuestionRun.start(EN_QUESTION, settings())
    with pytest.raises(Refused) as refused:
        citations_stage(run, "The client waits [7].", hits(EN_DOC))
    assert refused.value.reason.startswith("invalid citations [7]")
    assert refused.value.answer == texts.say("rejected", "en", why=refused.value.reason)
    assert run.trace["rejected_citations"] == [7]
    citations_stage(run, "The client waits [2].", hits(EN_DOC))  # a valid citation passes


@pytest.mark.parametrize(
    ("question", "mark"),
    [(RU_QUESTION, "(ссылка удалена)"), (EN_QUESTION, "(link removed)")],
    ids=["ru", "en"],
)
def test_a_removed_link_is_marked_in_the_question_language(generator, question, mark):
    generator(None)
    run = QuestionRun.start(question, settings())
    answer, removed = links_stage(run, "See https://evil.example/x for more [1].", hits(EN_DOC))
    assert removed == ["https://evil.example/x"] and mark in answer and "evil" not in answer


def test_a_low_confidence_refusal_keeps_its_confidence(generator):
    generator(None)
    run = QuestionRun.start(EN_QUESTION, settings(min_confidence=1.0))
    resp = respond(run, hits(EN_DOC))
    assert resp.no_answer and resp.answer == texts.say("no_answer", "en")
    assert resp.confidence is not None and resp.reason.startswith(f"confidence {resp.confidence:.2f}")
    assert resp.trace["confidence"]["judged"] is True


def test_the_judge_follows_the_setting_and_the_generator():
    assert judge_of("off", "anthropic") is None and judge_of("off", "extractive") is None
    assert judge_of("auto", "extractive") == "structural" and judge_of("auto", "anthropic") is None
    assert judge_of("lexical", "anthropic") == "lexical"


def test_the_run_reports_its_reasons_timings_and_trace(generator):
    generator(None)
    run = QuestionRun.start(EN_QUESTION, settings())
    run.reasons.append("embedder: timeout after 2s")
    run.trace["router"] = {"route": "simple"}
    resp = respond(run, hits(EN_DOC))
    assert resp.degraded and resp.degraded_reasons == ["embedder: timeout after 2s"]
    assert {"context", "generate", "total"} <= set(resp.timings_ms)
    assert (
        resp.trace["router"] == {"route": "simple"} and resp.trace["generator"]["generator"] == "extractive"
    )
    assert generate.EXTRACTIVE == "extractive"


class TimingOutEmbedder:
    """The sentence ranker's embedder past its deadline (a busy machine)."""

    def embed_query(self, text: str):
        return [1.0, 0.0]

    def embed_documents(self, texts: list[str]):
        raise TimeoutError


EN_QUESTION = "How long does the client wait after a 429 response?"


def test_an_answer_without_its_sentence_ranker_says_so(generator, monkeypatch):
    generator(None)
    monkeypatch.setattr(providers, "get_embedder", TimingOutEmbedder)
    run = QuestionRun.start(EN_QUESTION, settings())
    resp = respond(run, hits(RU_DOC))
    # an English question over a Russian passage is answered by quoting the passage's opening
    # sentences instead of the ones the ranker would pick: degraded, and why
    assert not resp.no_answer and resp.degraded
    assert resp.degraded_reasons == ["sentence ranker: TimeoutError"]


def test_a_failing_chat_model_and_a_failing_ranker_are_both_named(generator, monkeypatch):
    generator(FakeChat(RuntimeError("down")))
    monkeypatch.setattr(providers, "get_embedder", TimingOutEmbedder)
    run = QuestionRun.start(EN_QUESTION, settings(provider="anthropic"))
    resp = respond(run, hits(RU_DOC))
    assert resp.degraded_reasons == ["generator: RuntimeError", "sentence ranker: TimeoutError"]


class _Axis:
    """An embedder whose vectors have ``dim`` components, every text on the first axis."""

    def __init__(self, dim: int, model: str) -> None:
        self.dim, self.model = dim, model

    def embed_query(self, text: str):
        return [1.0] + [0.0] * (self.dim - 1)

    def embed_documents(self, texts: list[str]):
        return [[1.0] + [0.0] * (self.dim - 1) for _ in texts]


def test_one_process_ranks_the_same_sentences_with_two_embedders(monkeypatch):
    """The sentence vectors are cached per embedder: a process that builds another one (another
    model, an evaluation, a test) never reads the first model's vectors as the second's, whose
    dimensions may differ (a ValueError that degraded the answer, depending on what ran before)."""
    sentences = ["Клиент ждёт 30 секунд после ответа 429.", "Второе предложение."]
    for dim, model in ((4, "a"), (2, "b"), (4, "a")):
        monkeypatch.setattr(providers, "get_embedder", lambda dim=dim, model=model: _Axis(dim, model))
        rank = generate.sentence_ranker()
        assert rank is not None and rank("How long?", sentences) == [1.0, 1.0]
