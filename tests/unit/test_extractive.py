"""The offline extractive answer reads well on real chunks: no code or markup fragments, no label
glued onto a sentence, no sentence twice from overlapping chunks, the definition first.

The chunk texts are real chunks of ../shared/datasets/ru-docs (as ``chunk_blocks`` cuts them):
Vue.js 3 documentation, Russian translation, CC BY 4.0, © Yuxi (Evan) You and Vue documentation
contributors (guide/essentials/computed.md, guide/reusability/plugins.md,
guide/extras/composition-api-faq.md); OWASP Top 10 2017,
Russian translation, CC BY-SA 4.0, © The OWASP Foundation (2017/ru/0xa4-xxe.md); Vue.js 2
documentation, Russian translation, MIT, © Yuxi Evan You (v2/guide/computed.html).
"""

from __future__ import annotations

import re

from ragline.query.answer.extractive import (
    extract,
    extractive_answer,
    is_code_or_markup,
    prose_sentences,
    sentence_key,
)
from ragline.query.answer.prompt import NO_ANSWER
from ragline.shared.sdk.contracts import Hit

COMPUTED_0 = """Выражения внутри шаблона удобны, но предназначены для простых операций. Большое количество \
логики в шаблоне сделает его раздутым и сложным для поддержки. Например, если есть объект с вложенным массивом:
export default {
  data() {
    return {
      author: {
        name: 'John Doe',
        books: [
          'Vue 2 - Advanced Guide',
          'Vue 3 - Basic Guide',
          'Vue 4 - The Mystery'
        ]
      }
    }
  }
}
const author = reactive({
  name: 'John Doe',
  books: [
    'Vue 2 - Advanced Guide',
    'Vue 3 - Basic Guide',
    'Vue 4 - The Mystery'
  ]
})
И потребуется отображать разные сообщения, в зависимости от того, есть ли у author какие-то книги или нет:
<p>Есть опубликованные книги:</p>
<span>{{ author.books.length > 0 ? 'Да' : 'Нет' }}</span>"""

COMPUTED_2 = """<p>Есть опубликованные книги:</p>
<span>{{ publishedBooksMessage }}</span>
Попробовать в песочнице
В этом примере объявляем новое вычисляемое свойство publishedBooksMessage.
Попробуйте изменить в массиве books количество книг в data приложения и увидите, как обновится и значение \
publishedBooksMessage.
В шаблоне к вычисляемым свойствам можно обращаться как и к обычным свойствам. Vue знает, что \
this.publishedBooksMessage зависит от значения this.author.books, поэтому будет обновлять все привязки, которые \
зависят от this.publishedBooksMessage, при изменениях this.author.books.
См. также: Типизация вычисляемых свойств"""

COMPUTED_6 = """Вычисляемое свойство будет пересчитываться только при изменении одной из своих зависимостей. \
А значит, пока не изменится author.books, любое число обращений к вычисляемому свойству publishedBooksMessage \
будет немедленно возвращать ранее вычисленный результат, без необходимости повторного запуска функции-геттера.
Это также означает, что следующее вычисляемое свойство никогда не будет обновляться, потому что Date.now() не \
является реактивной зависимостью:
computed: {
  // НЕ БУДЕТ РАБОТАТЬ
  now() {
    return Date.now()
  }
}
// НЕ БУДЕТ РАБОТАТЬ
const now = computed(() => Date.now())
Для сравнения, вызов метода будет всегда запускать функцию, когда происходит перерисовка.
Зачем нужно кэширование?"""

COMPUTED_7 = """Для сравнения, вызов метода будет всегда запускать функцию, когда происходит перерисовка.
Зачем нужно кэширование? Представьте, что есть затратное вычисляемое свойство list, которому требуется \
проходить по большому массиву и выполнять различные вычисления. Далее, могут быть другие вычисляемые свойства, \
которые зависят от значения list. Без кэширования выполнять геттер list потребуется во много раз больше, чем \
это нужно! Когда же необходимо обойтись без кэширования — стоит использовать метод."""

PLUGINS_0 = """Плагины — это самодостаточный код, который обычно добавляет функциональность к Vue на уровне \
приложения. Вот как мы устанавливаем плагин:
import { createApp } from 'vue'

const app = createApp({})

app.use(myPlugin, {
  /* дополнительные опции */
})
Плагин определяется либо как объект, который предоставляет метод install(), либо просто как функция, которая \
действует как сама функция установки. Функция установки получает экземпляр приложения вместе с дополнительными \
опциями, которые передаются в app.use(), если таковые имеются:
const myPlugin = {
  install(app, options) {
    // настройка приложения
  }
}
Нет чётко определенной области применения плагина, но наиболее распространенные сценарии, в которых плагины \
полезны, включают в себя:"""

COMPOSITION_FAQ_1 = """Composition API — это набор API, который позволяет нам создавать компоненты Vue, используя \
импортированные функции вместо объявления опций. Это обобщающий термин, который охватывает следующие API:
Reactivity API, например ref() и reactive(), что позволяет нам напрямую создавать реактивное состояние, \
вычисляемое состояние, и наблюдатели.
Composition API встроено во Vue 3 и Vue 2.7. Для более старых версий Vue 2 используйте официально поддерживаемый \
плагин @vue/composition-api."""

PLUGINS_1 = """Регистрация одного или нескольких глобальных компонентов или пользовательских директив в \
app.component() и app.directive().
Сделать ресурс injectable во всём приложении через вызов app.provide().
Добавление некоторых свойств или методов глобального экземпляра, присоединив их к app.config.globalProperties.
Библиотека, которая должна выполнить определенную комбинацию вышеупомянутого (например, vue-router)."""

XXE_0 = """Источники угроз/Векторы атак | Недостатки безопасности | Последствия
Зависит от прил. : Сложность эксплуатации 2 | Распространенность 2 : Сложность обнаружения 3 | Технические 3 : \
Для бизнеса ?
Злоумышленники могут эксплуатировать уязвимые обработчики XML через загрузку XML или внедрение вредоносного \
контента в XML-документы, используя уязвимый код, зависимости или компоненты. | По умолчанию большинство старых \
обработчиков XML позволяют задавать внешние сущности, URI, которые разыменовываются и вычисляются при обработке \
XML. Инструменты SAST позволяют обнаружить уязвимость путем проверки зависимостей и конфигурации. | Подобные \
уязвимости могут использоваться для получения данных, выполнения удаленных запросов с сервера, сканирования \
внутренней системы, провоцирования отказа в обслуживании, а также осуществления других атак."""

MARKUP_FRAGMENT = re.compile(r"[{}<>`|]|=>|'Да'|'Нет'|\b(?:const|return|export)\b")


def hits(*contents: str) -> list[Hit]:
    return [Hit(doc_id=f"d{i}", chunk_no=0, content=c) for i, c in enumerate(contents, start=1)]


def answer_sentences(answer: str) -> list[str]:
    return [s.strip() for s in re.split(r"\s*\[\d+\]\s*|(?<=[.!?])\s+", answer) if s.strip()]


def test_code_and_template_lines_never_reach_the_answer():
    # the question shares words with the template line `{{ author.books.length > 0 ? 'Да' : 'Нет' }}`
    answer = extractive_answer("Как в шаблоне отображать, есть ли у author книги?", hits(COMPUTED_0))
    assert answer != NO_ANSWER
    # code is quoted only inside the fence under the sentence introducing it
    prose = re.sub(r"```.*?```", " ", answer, flags=re.S)
    assert not MARKUP_FRAGMENT.search(prose), answer
    assert "Выражения внутри шаблона удобны" in answer or "Большое количество логики" in answer


def test_code_lines_and_labels_are_not_sentences():
    # (a sentence carrying the code it introduces is one candidate, its block after a line break)
    sentences = [s for s in prose_sentences(COMPUTED_0 + "\n" + COMPUTED_2) if "\n" not in s]
    assert sentences[0] == "Выражения внутри шаблона удобны, но предназначены для простых операций."
    assert all(not MARKUP_FRAGMENT.search(s) for s in sentences), sentences
    # the label line "Попробовать в песочнице" is not glued onto the sentence under it
    assert "В этом примере объявляем новое вычисляемое свойство publishedBooksMessage." in sentences
    assert not any(s.startswith(("Попробовать", "См. также")) for s in sentences)
    assert all(not is_code_or_markup(s) for s in sentences)
    for code in (
        "const author = reactive({",
        "<span>{{ publishedBooksMessage }}</span>",
        "  // НЕ БУДЕТ РАБОТАТЬ",
    ):
        assert is_code_or_markup(code)


def test_prose_with_inline_identifiers_is_kept():
    for prose in (
        "Функция computed() ожидает передачи функции-геттера и возвращает значение в виде ref.",
        "<Suspense> — это встроенный компонент для организации асинхронных зависимостей в дереве компонентов.",
        "Регистрация одного или нескольких глобальных компонентов в app.component() и app.directive().",
    ):
        assert not is_code_or_markup(prose), prose


def test_a_sentence_of_overlapping_chunks_is_quoted_once():
    # computed.md chunks 6 and 7 overlap by the sentence "Для сравнения, вызов метода ..."
    answer = extractive_answer(
        "Когда вызов метода запускает функцию при перерисовке?", hits(COMPUTED_6, COMPUTED_7)
    )
    sentences = answer_sentences(answer)
    assert "Для сравнения, вызов метода" in answer, answer
    keys = [sentence_key(s) for s in sentences]
    assert len(keys) == len(set(keys)), answer
    assert answer.count("Для сравнения, вызов метода") == 1


def test_the_same_statement_from_two_versions_of_a_page_is_quoted_once():
    vue3 = (
        "Вместо вычисляемого свойства можно объявить эту же функцию в качестве метода. Для отображаемого "
        "результата эти два подхода действительно одинаковы."
    )
    vue2 = (
        "Вместо вычисляемого свойства, можно использовать ту же самую функцию в качестве метода. Но есть важное "
        "отличие: вычисляемые свойства кэшируются, основываясь на своих реактивных зависимостях."
    )
    answer = extractive_answer("Чем вычисляемые свойства отличаются от методов?", hits(vue3, vue2))
    assert answer.count("Вместо вычисляемого свойства") == 1, answer
    assert "вычисляемые свойства кэшируются" in answer


def test_table_rows_give_their_prose_cells():
    answer = extractive_answer("Как злоумышленники эксплуатируют уязвимые обработчики XML?", hits(XXE_0))
    assert answer.startswith("Злоумышленники могут эксплуатировать уязвимые обработчики XML")
    assert "|" not in answer and "Сложность эксплуатации" not in answer


def test_list_items_read_as_sentences():
    sentences = prose_sentences(
        "для предотвращения XXE необходимо:\n"
        "• отключить обработку внешних сущностей XML и DTD во всех XML-обработчиках приложения;"
    )
    item = "• отключить обработку внешних сущностей XML и DTD во всех XML-обработчиках приложения;"
    # the introducing sentence carries its list, and the item is a sentence of its own
    assert sentences == [f"для предотвращения XXE необходимо:\n{item}", item]
    sentences = sentences[1:]
    answer = extractive_answer("Как отключить обработку внешних сущностей XML?", hits(sentences[0]))
    assert (
        answer == "Отключить обработку внешних сущностей XML и DTD во всех XML-обработчиках приложения. [1]"
    )


def test_no_matching_sentence_is_no_answer():
    # a passage about something else is quoted, and the confidence model reads that nothing matched
    assert extract("квантовая хромодинамика", hits(COMPUTED_6)).features["lexical"] == 0.0
    # code, a template and a sentence announcing them: nothing to quote
    assert extractive_answer("Как отображать книги?", hits(COMPUTED_0.split("\n", 1)[1])) == NO_ANSWER


def test_a_sentence_introducing_a_code_block_carries_it():
    chunk = (
        "Настройка прокси.\n"
        "Чтобы использовать прокси, передайте его адрес клиенту:\n"
        "proxies = {'https': 'http://10.10.1.10:1080'}\n"
        "requests.get('http://example.org', proxies=proxies)\n"
        "Прокси можно задать и переменными окружения HTTP_PROXY и HTTPS_PROXY."
    )
    docs = hits(chunk)
    ex = extract("Как передать адрес прокси клиенту?", docs)
    assert "клиенту: [1]\n```\nproxies = {'https': 'http://10.10.1.10:1080'}\nrequests.get(" in ex.text, (
        ex.text
    )
    # the block is quoted as written: the structural check finds every claim in the passage
    from ragline.query.answer import grounding

    g = grounding.check(ex.text, [chunk], "structural", 0.5, None, ex.framing)
    assert g.removed == [] and g.support == 1.0


def test_the_composed_answer_comes_in_segments_that_make_its_text():
    docs = hits(COMPUTED_0, COMPUTED_6)
    for question in ("Как в шаблоне отображать, есть ли у author книги?", "Перечисли, что кэшируется."):
        ex = extract(question, docs)
        assert len(ex.segments) >= 1 and "".join(ex.segments) == ex.text
    cross = extract(
        "Why are templates with much logic hard to maintain?", docs, lambda q, ss: [0.5] * len(ss)
    )
    assert cross.segments[0] == "From the documentation (in Russian):\n"
    assert "".join(cross.segments) == cross.text


def test_the_confidence_does_not_read_the_corpus_cosine_level():
    """The confidence is the same for a corpus whose cosines all run higher (a technical manual's
    against an encyclopaedia's, or an embedder with a narrower scale): the level says the genre and
    the model, not whether the answer is right. What it reads is how far the best sentence and the
    best hit stand out of their neighbours (``Hit.vector_z``: standardised in the search)."""
    from ragline.query.answer.extractive import hit_z
    from ragline.query.answer.grounding import answer_probability

    question = "Что такое вычисляемые свойства?"
    contents = (COMPUTED_2, COMPUTED_6, XXE_0)

    def answer(shift: float, z: tuple[float, ...] = (4.2, 2.5, 1.1)):
        found = [
            h.model_copy(update={"vector_distance": d - shift, "vector_z": hz})
            for h, d, hz in zip(hits(*contents), (0.14, 0.2, 0.23), z, strict=True)
        ]

        def rank(q: str, sentences: list[str]) -> list[float]:
            return [0.7 + shift + 0.01 * (len(s) % 17) for s in sentences]

        return extract(question, found, rank).features

    low, high = answer(0.0), answer(0.08)
    assert hit_z(hits(*contents)) is None  # no vector list: unknown, no error
    assert low["hit_z"] == high["hit_z"] == 4.2
    assert answer_probability(low) == answer_probability(high)
    # a question the scope lacks: its best hit is one of its neighbours
    assert answer_probability(answer(0.0, (0.9, 0.8, 0.7))) < answer_probability(low)


def test_a_lone_candidate_is_not_scored_as_an_average_one():
    """With one candidate sentence and one hit there is nothing to stand above: the relative
    features are unknown (None) and move the probability neither way, instead of reading as the
    lowest similarity the fit ever saw (a one-document folder's obvious answer was refused)."""
    from ragline.query.answer.grounding import answer_probability

    hit = hits("ragline отвечает на вопросы со ссылками на документы.")[0]
    found = [hit.model_copy(update={"vector_distance": 0.12})]
    feats = extract("Что делает ragline?", found, lambda q, ss: [0.9 for _ in ss]).features
    assert feats["similarity"] is None and feats["hit_z"] is None
    known = {**feats, "similarity": 0.0, "hit_z": 0.0}
    assert answer_probability(feats) > answer_probability(known)
