"""Which sentences the offline answer quotes from a passage that holds the answer among others:
one sentence for each part of a question asking two things, the sentence stating the difference
for a comparison, the labelled points of a section enumerating them, and the items of a table
for a list question asked in another language than the passages.

Chunk texts are real, as the chunker cut them: Vue 3 documentation in Russian (CC BY 4.0, © Yuxi
(Evan) You and contributors), guide/essentials/computed.md and guide/reusability/composables.md;
OWASP ASVS 4.0.3 in Russian (CC BY-SA, © The OWASP Foundation), 0x11-V2-Authentication.md and
0x22-V14-Config.md; psf/requests at tag psf__requests-2317 (Apache-2.0, © Kenneth Reitz),
docs/user/advanced.rst.
"""

from __future__ import annotations

import re

import pytest

from ragline.query.answer.extractive import (
    answering_parts,
    candidates,
    extract,
    labelled,
    point_sentence,
    referred_points,
    select,
    select_compared,
)
from ragline.query.question import compared, question_parts
from ragline.shared.sdk.contracts import Hit

COMPUTED_3 = """<template>
  <p>Есть опубликованные книги:</p>
  <span>{{ publishedBooksMessage }}</span>
</template>
Попробовать в песочнице
В этом примере объявляем новое вычисляемое свойство publishedBooksMessage. Функция computed() ожидает передачи \
функции-геттера и возвращает значение в виде ref вычисляемого свойства."""

COMPUTED_5 = """Можно заметить, что того же результата можно достичь с помощью метода в выражении:
<p>{{ calculateBooksMessage() }}</p>
// в компоненте
methods: {
  calculateBooksMessage() {
    return this.author.books.length > 0 ? 'Да' : 'Нет'
  }
}
Вместо вычисляемого свойства можно объявить эту же функцию в качестве метода. Для отображаемого результата эти \
два подхода действительно одинаковы. Однако разница заключается в том, что вычисляемые свойства кэшируются на \
основе своих реактивных зависимостей. Вычисляемое свойство будет пересчитываться только при изменении одной из \
своих зависимостей."""

COMPUTED_6 = """Вычисляемое свойство будет пересчитываться только при изменении одной из своих зависимостей. \
А значит, пока не изменится author.books, любое число обращений к вычисляемому свойству publishedBooksMessage \
будет немедленно возвращать ранее вычисленный результат, без необходимости повторного запуска функции-геттера.
// НЕ БУДЕТ РАБОТАТЬ
const now = computed(() => Date.now())
Для сравнения, вызов метода будет всегда запускать функцию, когда происходит перерисовка.
Зачем нужно кэширование?"""

COMPOSABLES_24 = """Пользователи, пришедшие из Vue 2, могут быть знакомы с опцией mixins, которая также позволяет \
извлекать логику компонентов в виде многократно используемых блоков. У миксинов есть три основных недостатка:
Неясный источник свойств: при использовании большого количества миксинов становится непонятно, какое свойство \
экземпляра инжектируется каким миксином, что затрудняет отслеживание реализации и понимание поведения компонента. \
Именно поэтому мы рекомендуем использовать паттерн refs + деструктуризация для composables: это делает источник \
свойств ясным в потребляющих компонентах.
Коллизии в пространстве имён: несколько миксинов от разных авторов могут регистрировать одни и те же ключи \
свойств, что приводит к коллизиям в пространстве имён."""

COMPOSABLES_25 = """При использовании composables можно переименовать деструктурированные переменные, если \
имеются конфликтующие ключи из разных composables.
Неявное взаимодействие между миксинами: несколько миксинов, которым необходимо взаимодействовать друг с другом, \
должны опираться на общие ключи свойств, что делает их неявно связанными. С помощью composables, значения, \
возвращаемые одним composable, могут передаваться в другой в качестве аргументов, как и в обычных функциях.
По указанным выше причинам мы больше не рекомендуем использовать миксины во Vue 3. Эта возможность сохраняется \
только для миграции и ознакомления."""

ADVANCED_9 = """Requests can verify SSL certificates for HTTPS requests, just like a web browser. To check a \
host's SSL certificate, you can use the ``verify`` argument:
>>> requests.get('https://kennethreitz.com', verify=True)
requests.exceptions.SSLError: hostname 'kennethreitz.com' doesn't match either of '*.herokuapp.com', 'herokuapp.com'
I don't have SSL setup on this domain, so it fails. Excellent. GitHub does though:
>>> requests.get('https://github.com', verify=True)
<Response [200]>
You can pass ``verify`` the path to a CA_BUNDLE file with certificates of trusted CAs. This list of trusted CAs \
can also be specified through the ``REQUESTS_CA_BUNDLE`` environment variable.
Requests can also ignore verifying the SSL certificate if you set ``verify`` to False."""

CONFIG_9 = """№ | Описание | L1 | L2 | L3 | CWE
14.4.1 | Убедитесь, что каждый HTTP-ответ содержит заголовок Content-Type. Если тип контента — text/*, /+xml или \
application/xml, то должна быть указана безопасная кодовая страница (например, charset=UTF-8 или ISO-8859-5). \
Контент должен соответствовать предоставленному заголовку Content-Type. | ✓ | ✓ | ✓ | 173
14.4.2 | Убедитесь, что все ответы API содержат заголовок Content-Disposition: attachment; filename="api.json" (или \
другое наименование файла, подходящее для этого типа контента). | ✓ | ✓ | ✓ | 116
14.4.3 | Убедитесь, что присутствует заголовок ответа Content Security Policy (CSP), который помогает ослабить \
воздействие XSS-атак через HTML, DOM, JSON или через инъекции JavaScript. | ✓ | ✓ | ✓ | 1021
14.4.4 | Убедитесь, что ответы содержат заголовок X-Content-Type-Options: nosniff. | ✓ | ✓ | ✓ | 116
14.4.5 | Убедитесь, что заголовок Strict-Transport-Security включен во все ответы и для всех поддоменов, например, \
Strict-Transport-Security: max-age=15778463. | ✓ | ✓ | ✓ | 523
14.4.6 | Убедитесь, что присутствует заголовок Referrer-Policy с уместным для приложения значением, чтобы избежать \
раскрытия недоверенным сторонам конфиденциальной информации в URL-адресе через заголовок Referer. | ✓ | ✓ | ✓ | 116"""

AUTH_10 = """№ | Описание | L1 | L2 | L3 | CWE | NIST
2.1.1 | Убедитесь, что устанавливаемые пользователем пароли имеют длину не менее 12 символов (после объединения \
пробелов, если они идут подряд). ( C6 ) | ✓ | ✓ | ✓ | 521 | 5.1.1.2
2.1.2 | Убедитесь, что разрешены пароли длиной не менее 64 символов и что пароли длиной более 128 символов \
запрещены. ( C6 ) | ✓ | ✓ | ✓ | 521 | 5.1.1.2
2.1.3 | Убедитесь, что отсутствует усечение пароля по длине. Идущие подряд несколько пробелов могут быть заменены \
одним. ( C6 ) | ✓ | ✓ | ✓ | 521 | 5.1.1.2
2.1.5 | Убедитесь, что пользователи могут менять свой пароль. | ✓ | ✓ | ✓ | 620 | 5.1.1.2
2.1.6 | Убедитесь, что при изменении пароля требуется ввести текущий и новый пароль пользователя. | ✓ | ✓ | ✓ | \
620 | 5.1.1.2"""


#: the chunk as the Markdown parser left it (the list with indented code blocks stayed Markdown)
REACTIVITY_23 = """   let state = reactive({ count: 0 })

   // вышеуказанная ссылка ({ count: 0 }) больше не отслеживается
   // (реактивность потеряна!)
   state = reactive({ count: 1 })
   ```

3. **Не дружелюбен к деструктуризации:** когда мы деструктурируем свойство примитивного типа реактивного объекта \
в локальные переменные или передаем это свойство в функцию, мы теряем связь с реактивностью:

```js
   const state = reactive({ count: 0 })

   // При деструктуризации count отсоединяется от state.count.
   let { count } = state
   ```

В связи с этими ограничениями мы рекомендуем использовать `ref()` в качестве основного API для объявления \
реактивного состояния.

## Дополнительные детали разворачивания Ref {#additional-ref-unwrapping-details}

Ссылка автоматически разворачивается, когда к ней обращаются или она изменяется как свойство реактивного объекта."""


def hit(doc_id: str, content: str, heading: str = "", chunk_no: int = 0) -> Hit:
    return Hit(doc_id=doc_id, chunk_no=chunk_no, heading=heading, content=content)


# ------------------------------------------------------------------------------ parts of a question
@pytest.mark.parametrize(
    ("question", "parts"),
    [
        (
            "How do I make requests verify HTTPS certificates against my own CA bundle, and which environment "
            "variables can set it?",
            [
                "How do I make requests verify HTTPS certificates against my own CA bundle",
                "which environment variables can set it",
            ],
        ),
        (
            "According to ASVS, how long may user passwords be, and may they be truncated?",
            ["According to ASVS, how long may user passwords be", "may they be truncated"],
        ),
        (
            "Какие события (hooks) поддерживает requests и как подключить свой обработчик ответа к запросу?",
            [
                "Какие события (hooks) поддерживает requests",
                "как подключить свой обработчик ответа к запросу",
            ],
        ),
        ("Какова длина пароля, и можно ли его усекать?", ["Какова длина пароля", "можно ли его усекать"]),
        # one question: "and" inside a part, a yes/no word without the comma before it
        ("Which exceptions does requests raise for timeouts and redirects?", None),
        ("How do I cache and reuse sessions?", None),
        ("Is it safe and can it be undone?", None),
    ],
)
def test_a_question_splits_where_its_second_part_starts(question, parts):
    assert question_parts(question) == (parts or [question])


def test_a_second_part_leaning_on_the_first_is_no_search_of_its_own():
    from ragline.query.answer.agentic import route

    assert (
        route("According to ASVS, how long may user passwords be, and may they be truncated?").route
        == "simple"
    )
    assert (
        route("What forms can the timeout argument take, and how is a tuple interpreted?").route
        == "decompose"
    )


CA_QUESTION = (
    "How do I make requests verify HTTPS certificates against my own CA bundle, and which environment "
    "variables can set it?"
)


def test_each_part_of_a_question_gets_its_sentence():
    hits = [hit("requests/docs/user/advanced.rst", ADVANCED_9)]
    chosen = select(candidates(CA_QUESTION, hits), 2)
    # the whole question's two best sentences both speak of verifying against a bundle
    assert any("REQUESTS_CA_BUNDLE" in c.text for c in chosen), [c.text for c in chosen]
    assert any("verify" in c.text for c in chosen)


def test_a_part_is_answered_only_by_a_sentence_holding_most_of_its_own_terms():
    cands = candidates(
        "What forms can the timeout argument take, and how is a tuple interpreted?",
        [
            hit(
                "requests/cookies.py",
                "Dict-like iteritems() that returns an iterator of name-value tuples from the jar.",
            ),
            hit(
                "requests/docs/user/advanced.rst",
                "You can tell Requests to stop waiting for a response after a given "
                "number of seconds with the timeout parameter.",
            ),
        ],
    )
    # "tuples" is one of the second part's two own terms (tuple, interpreted): a tangent
    assert answering_parts(cands, 3) == []


def test_a_question_of_one_part_is_answered_as_before():
    cands = candidates(
        "How do I make requests verify HTTPS certificates against my own CA bundle?",
        [hit("requests/docs/user/advanced.rst", ADVANCED_9)],
    )
    assert all(not c.parts for c in cands)
    assert answering_parts(cands, 3) == []


# ------------------------------------------------------------------------------------- comparisons
def test_a_comparison_quotes_the_sentence_that_states_the_difference():
    question = "В чём разница между вычисляемым свойством (computed) и методом во Vue?"
    heading = "Вычисляемые свойства › Кэширование вычисляемых свойств vs. Методы"
    hits = [  # as the hybrid search ranks them: the section on computed() first, which names one side
        hit("vue3/guide/essentials/computed.md", COMPUTED_3, "Вычисляемые свойства › Простой пример", 3),
        hit("vue3/guide/essentials/computed.md", COMPUTED_5, heading, 5),
        hit("vue3/guide/essentials/computed.md", COMPUTED_6, heading, 6),
    ]
    chosen = select_compared(candidates(question, hits), compared(question))
    texts = [c.text for c in chosen]
    # it names one side only ("вычисляемые свойства"), the other is the sentence before it; the
    # sentences naming both ("Вместо вычисляемого свойства … метода") or each side say no difference
    assert any(t.startswith("Однако разница заключается") for t in texts), texts
    assert extract(question, hits).kind == "compare"


def test_a_comparison_over_a_section_enumerating_drawbacks_quotes_its_points():
    question = "Чем composables лучше миксинов во Vue 3?"
    heading = "Composables › Сравнение с другими методами › vs. Миксины"
    hits = [
        hit("vue3/guide/reusability/composables.md", COMPOSABLES_24, heading, 24),
        hit("vue3/guide/reusability/composables.md", COMPOSABLES_25, heading, 25),
    ]
    ex = extract(question, hits)
    labels = [re.match(r"[^:]+", t).group(0) for _, t in ex.quoted]
    assert labels == [
        "Неясный источник свойств",
        "Коллизии в пространстве имён",
        "Неявное взаимодействие между миксинами",
    ]
    assert "[1]" in ex.text and "[2]" in ex.text


def test_points_of_another_section_are_not_this_comparison_s_points():
    question = "Чем composables лучше миксинов во Vue 3?"
    hits = [
        hit("vue3/guide/reusability/composables.md", COMPOSABLES_24, "Composables › vs. Миксины", 24),
        hit("vue3/guide/reusability/composables.md", COMPOSABLES_25, "Composables › Другое", 25),
    ]
    cands = candidates(question, hits)
    # one labelled point left in the best sentence's section: no enumeration
    assert not [c for c in select_compared(cands, compared(question)) if c.n == 2 and labelled(c.text)]


@pytest.mark.parametrize(
    ("text", "is_point"),
    [
        (
            "Неясный источник свойств: при использовании большого количества миксинов становится непонятно.",
            True,
        ),
        (
            "Implicit cross-mixin communication: multiple mixins that need to interact rely on shared keys.",
            True,
        ),
        ("Примечание: цель состоит в том, чтобы повысить удобство.", False),  # one word: a remark
        ("Давайте создадим пример пользовательского модификатора capitalize:", False),  # announces code
        ("max_retries: The maximum number of retries each connection should attempt.", False),
        ("Это работает так (см. выше): вызов возвращает значение.", False),
    ],
)
def test_a_labelled_point_opens_with_a_label_of_two_to_six_words(text, is_point):
    assert labelled(text) is is_point


# ---------------------------------------------------------------------------- another language
def glossary_ranker(pairs: dict[str, str]):
    """Similarity by a small English–Russian glossary: the share of the question's glossed words
    whose Russian stem the sentence holds (the embedder's similarity, without a model)."""

    def rank(question: str, sentences: list[str]) -> list[float]:
        wanted = [ru for en, ru in pairs.items() if en in question.lower()]
        return [sum(ru in s.lower() for ru in wanted) / max(1, len(wanted)) for s in sentences]

    return rank


def test_a_list_question_in_another_language_gets_the_rows_of_the_table():
    question = "Which HTTP security response headers does ASVS require in section V14.4?"
    hits = [hit("asvs/0x22-V14-Config.md", CONFIG_9, "V14 Конфигурация › V14.4 HTTP-заголовки безопасности")]
    ex = extract(question, hits, glossary_ranker({"headers": "заголов", "security": "безопасн"}))
    assert ex.kind == "crosslingual"
    framing, *items = ex.text.splitlines()
    assert framing == "From the documentation (in Russian):"
    assert [i.split(" ", 2)[1] for i in items] == [f"14.4.{k}" for k in range(1, 7)], ex.text


def test_each_part_of_a_question_in_another_language_gets_its_sentence():
    question = "According to ASVS, how long may user passwords be, and may they be truncated?"
    hits = [hit("asvs/0x11-V2-Authentication.md", AUTH_10, "V2 Аутентификация › V2.1 Парольная защита")]
    rank = glossary_ranker({"passwords": "парол", "long": "длин", "truncated": "усечен"})
    ex = extract(question, hits, rank)
    quoted = [t.split(" ", 1)[0] for _, t in ex.quoted]
    # the whole question ranks the rows on the length first: the truncation row is the second part's
    assert "2.1.3" in quoted and quoted[0] in {"2.1.1", "2.1.2"}, ex.text


def test_the_sentence_ranker_embeds_each_sentence_once_per_answer(monkeypatch):
    import numpy as np

    from ragline.query.answer import generate

    embedded: list[str] = []

    class Embedder:
        def embed_query(self, text):
            return np.ones(4, dtype=np.float32)

        def embed_documents(self, texts):
            embedded.extend(texts)
            return [np.full(4, float(len(t)), dtype=np.float32) for t in texts]

    monkeypatch.setattr(generate.providers, "get_embedder", lambda: Embedder())
    rank = generate.sentence_ranker()
    assert rank is not None
    first = rank("how long may passwords be", ["a", "bb"])
    again = rank("may they be truncated", ["bb", "a", "ccc"])
    assert len(embedded) == 3  # "a", "bb", then only "ccc"
    assert first == [4.0, 8.0] and again == [8.0, 4.0, 12.0]


# ------------------------------------------------------------------- a conclusion from the points before it
def test_a_conclusion_is_quoted_with_the_points_it_draws_on():
    question = "Почему для объявления реактивного состояния рекомендуется ref(), а не reactive()?"
    heading = "Основы реактивности › reactive() › Ограничения reactive()"
    ex = extract(
        question, [hit("vue3/guide/essentials/reactivity-fundamentals.md", REACTIVITY_23, heading, 23)]
    )
    quoted = [t for _, t in ex.quoted]
    at = next(i for i, t in enumerate(quoted) if t.startswith("В связи с этими ограничениями"))
    assert at > 0 and quoted[at - 1].startswith("Не дружелюбен к деструктуризации: когда мы"), quoted
    # the colon announcing the example reads as the end of the point
    assert quoted[at - 1].endswith("мы теряем связь с реактивностью.")


def test_a_conclusion_refers_back_only_when_it_says_so():
    assert (
        referred_points(REACTIVITY_23, "Ссылка автоматически разворачивается, когда к ней обращаются.") == []
    )
    # the points of the section above the heading are not this conclusion's
    text = REACTIVITY_23 + "\nПо указанным выше причинам ссылки удобнее."
    assert referred_points(text, "По указанным выше причинам ссылки удобнее.") == []
    assert referred_points(
        COMPOSABLES_25, "По указанным выше причинам мы больше не рекомендуем использовать миксины во Vue 3."
    ) == [
        "Неявное взаимодействие между миксинами: несколько миксинов, которым необходимо взаимодействовать друг с "
        "другом, должны опираться на общие ключи свойств, что делает их неявно связанными."
    ]


@pytest.mark.parametrize(
    ("line", "point"),
    [
        (
            "3. **Не дружелюбен к деструктуризации:** когда мы деструктурируем свойство, мы теряем связь с реактивностью:",
            "Не дружелюбен к деструктуризации: когда мы деструктурируем свойство, мы теряем связь с реактивностью.",
        ),
        (
            "- **Implicit coupling**: mixins that interact rely on shared keys. Composables pass values instead.",
            "Implicit coupling: mixins that interact rely on shared keys.",
        ),
        ("Давайте создадим пример пользовательского модификатора capitalize:", None),
        ("const state = reactive({ count: 0 })", None),
    ],
)
def test_a_point_is_its_first_sentence_without_its_marks(line, point):
    assert point_sentence(line) == point
