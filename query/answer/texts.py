"""Every text an answer shows a person that ragline writes itself (refusals, the framing around
quoted passages), in the language of the question. Pure functions.

The quotes come from the documents and stay in their own language; what is ragline's own speech
follows the question, so an English question over Russian documents gets English framing around
Russian quotes, and an English refusal. One table holds all of it: a new text or a new language is
added here and nowhere else. ``reason`` fields and logs stay English: they are for operators.

:data:`NO_ANSWER_MARK` is what a chat model is told to answer when the documents hold nothing (the
prompt is Russian, so the mark is too); the answer path recognises any refusal the model may have
echoed (:func:`is_refusal`) and replaces it with the refusal of the question's language.
"""

from __future__ import annotations

from ragline.shared.worker.text import FALLBACK, LANGUAGES, language_of

__all__ = ["FALLBACK", "LANGUAGES", "language_of"]

TEXTS: dict[str, dict[str, str]] = {
    "page": {"ru": "с. {page}", "en": "p. {page}"},
    "no_answer": {
        "ru": "В базе знаний нет ответа на этот вопрос.",
        "en": "The knowledge base holds no answer to this question.",
    },
    "rejected": {"ru": "Ответ отклонён: {why}.", "en": "The answer was rejected: {why}."},
    "interrupted": {"ru": "Ответ прерван: {why}.", "en": "The answer broke off: {why}."},
    # what a bare URL or an autolink the cited documents do not contain becomes (query/answer/sanitize.py)
    "link_removed": {"ru": "(ссылка удалена)", "en": "(link removed)"},
    # a code answer: the place first, the lines after it as a code block
    "code_place": {"ru": "Это `{place}`{symbol}", "en": "It is `{place}`{symbol}"},
    "code_symbol": {"ru": ", `{symbol}`", "en": ", `{symbol}`"},
    # quotes in another language than the question's
    "quoted_in": {"ru": "Из документации ({language}):", "en": "From the documentation ({language}):"},
}

#: the refusal the (Russian) prompt tells a chat model to answer with (:mod:`ragline.query.answer.prompt`)
NO_ANSWER_MARK = TEXTS["no_answer"]["ru"]

#: the documents' language as the framing names it, in the question's language
LANGUAGE_NAMES: dict[str, dict[str, str]] = {
    "ru": {"ru": "на русском", "en": "in Russian"},
    "en": {"ru": "на английском", "en": "in English"},
}


def say(key: str, lang: str, **values: str) -> str:
    """The text ``key`` in ``lang`` (the fallback language for one ragline does not speak)."""
    forms = TEXTS[key]
    return forms.get(lang, forms[FALLBACK]).format(**values)


def no_answer(lang: str) -> str:
    return say("no_answer", lang)


def language_name(of: str, lang: str) -> str:
    """``of`` (a language code) named in ``lang``: "in Russian", "на английском"."""
    names = LANGUAGE_NAMES.get(of, {})
    return names.get(lang, names.get(FALLBACK, of))


#: every refusal ragline writes, in every language: an answer that is one of them is no answer
_REFUSALS = frozenset(form.rstrip(".") for form in TEXTS["no_answer"].values())


def is_refusal(answer: str) -> bool:
    """An empty answer, or one holding a refusal of any language (a chat model told to answer
    :func:`no_answer` may echo it inside a sentence of its own)."""
    return not answer.strip() or any(r in answer for r in _REFUSALS)


#: the framing texts, as patterns of the lines they render (a placeholder matches any text, a
#: citation marker and the colon announcing a quote may follow)
_FRAMING_KEYS = ("code_place", "quoted_in")


def _form_pieces(form: str) -> list[str]:
    """A framing form's literal pieces around its ``{placeholder}``s (each matches any text)."""
    pieces, rest = [], form
    while (open_ := rest.find("{")) >= 0 and (close := rest.find("}", open_)) >= 0:
        pieces.append(rest[:open_])
        rest = rest[close + 1 :]
    return [*pieces, rest]


_FRAMING = [_form_pieces(form) for key in _FRAMING_KEYS for form in TEXTS[key].values()]


def _tail_cuts(line: str) -> list[int]:
    """Where the line's text may end before what may follow a form: a colon announcing a quote,
    citation markers ``[n]`` (read from the right, one pass)."""
    end = len(line)
    cuts = [end]
    if line.endswith(":"):
        end -= 1
        cuts.append(end)
    while line[:end].endswith("]"):
        opening = line.rfind("[", 0, end)
        number = line[opening + 1 : end - 1]
        if opening < 0 or not (number.isascii() and number.isdigit() and len(number) <= 3):
            break
        end = len(line[:opening].rstrip())
        cuts.append(end)
    return cuts


def _is_form(line: str, pieces: list[str]) -> bool:
    """``line`` renders the form of ``pieces``: its first piece starts it, the middle ones follow
    in order, the last ends it before a colon or citation markers (no regex: the line quotes
    documents)."""
    if not line.startswith(pieces[0]):
        return False
    at = len(pieces[0])
    for piece in pieces[1:-1]:
        found = line.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    if len(pieces) == 1:
        return at in _tail_cuts(line)
    last = pieces[-1]
    return any(line[:cut].endswith(last) and cut - len(last) >= at for cut in _tail_cuts(line))


def framing_lines(answer: str) -> list[str]:
    """The lines of an answer that are ragline's framing around quotes (a code answer's place,
    "From the documentation (in Russian):"): a judge of the answer's claims skips them."""
    return [line for line in answer.splitlines() if any(_is_form(line.strip(), p) for p in _FRAMING)]
