"""Context assembly: what the answer generator reads, built from the ranked hits. Pure functions.

Three steps (merging and ordering switched by ``query/answer/run.py`` POLICY, the budget a setting
per generator):

* **merge**: chunks of one document that are neighbours (consecutive ``chunk_no``) or repeat each
  other's boundary sentences (the chunker's whole-sentence overlap) become one passage, with the
  repeated text written once. A passage keeps its chunks, so a citation of the passage can still
  name the chunk that holds the cited sentence (:func:`chunk_for`).
* **budget**: passages are taken in relevance order while their estimated tokens fit the
  generator's budget; the rest are dropped (listed in the trace). No tokenizer of the chat models
  is available offline (tiktoken downloads its BPE files at run time, Anthropic counts tokens only
  through its API), so tokens are estimated from characters: :func:`estimate_tokens`.
* **order**: the passages keep their numbers ``[N]`` (1 = most relevant), but the prompt lists
  them with the most relevant at the beginning and the end and the weakest in the middle, where
  long-context models read least carefully ("lost in the middle", Liu et al. 2023).

Squeezing long passages (asking the generator for the sentences that matter to the question before
the answer call) is :func:`squeeze`, with the generator call injected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ragline.query.answer.code_answer import is_code
from ragline.query.answer.extractive import stems
from ragline.query.answer.prompt import SQUEEZE_PROMPT
from ragline.query.deadline import QuestionDeadlineExceeded
from ragline.shared.sdk.contracts import Hit

_WORD = re.compile(r"\w+", re.UNICODE)
_CYRILLIC = re.compile(r"[\u0400-\u04FF]")

#: characters per token of the chat models' BPE vocabularies, measured on their public tokenizers
#: for typical prose: Latin-script text ~4, Cyrillic ~2.5 (Russian words split into more pieces)
CHARS_PER_TOKEN_LATIN = 4.0
CHARS_PER_TOKEN_CYRILLIC = 2.5
#: markup around each passage in the prompt (the <document ...> tag and its attributes)
PASSAGE_OVERHEAD_TOKENS = 40
#: the shortest repeated text taken for the chunker's overlap (shorter matches are coincidence)
MIN_OVERLAP_CHARS = 12


def estimate_tokens(text: str) -> int:
    """Tokens of ``text`` for a chat model, estimated from its characters (no tokenizer offline):
    Cyrillic letters at 2.5 characters a token, everything else at 4, rounded up. Deliberately on
    the high side so a budget is not overrun."""
    cyr = len(_CYRILLIC.findall(text))
    return math.ceil(cyr / CHARS_PER_TOKEN_CYRILLIC + (len(text) - cyr) / CHARS_PER_TOKEN_LATIN)


@dataclass
class Passage:
    """One numbered passage of the prompt: one or more chunks of one document, merged."""

    n: int  # the number the generator cites, [n]; 1 = most relevant
    hits: list[Hit]  # the chunks, in document order
    text: str  # their content with repeated overlap written once
    score: float  # the best chunk's ranking score
    squeezed: str | None = None  # the generator's shortened text, when squeezing ran
    tokens: int = 0

    @property
    def doc_id(self) -> str:
        return self.hits[0].doc_id

    @property
    def shown(self) -> str:
        """The text the answer generator reads."""
        return self.squeezed if self.squeezed is not None else self.text

    def as_hit(self, full: bool = False) -> Hit:
        """The passage as a hit (the prompt and the extractive generator read hits): the best
        chunk's metadata with the merged (or squeezed; ``full``: the merged) text."""
        best = max(self.hits, key=lambda h: h.score)
        first = self.hits[0]
        update = {
            "content": self.text if full else self.shown,
            "chunk_no": first.chunk_no,
            "heading": first.heading,
            "page": first.page,
        }
        if is_code(first):  # the excerpt's lines are numbered from its first chunk's (merged: they meet)
            ends = [h.metadata.get("end_line") for h in self.hits]
            update["metadata"] = {
                **best.metadata,
                "start_line": first.metadata["start_line"],
                "end_line": max((e for e in ends if isinstance(e, int)), default=None),
            }
        return best.model_copy(update=update)


@dataclass
class Assembly:
    passages: list[Passage]  # numbered 1..len, relevance order
    order: list[int]  # passage numbers in prompt order
    dropped: list[dict] = field(default_factory=list)  # chunks left out by the budget
    merged: int = 0  # chunks that joined an earlier chunk's passage
    tokens: int = 0

    def hits(self) -> list[Hit]:
        return [p.as_hit() for p in self.passages]

    def trace(self) -> dict:
        return {
            "passages": [
                {
                    "n": p.n,
                    "doc_id": p.doc_id,
                    "chunks": [h.chunk_no for h in p.hits],
                    "tokens": p.tokens,
                    **({"squeezed_tokens": estimate_tokens(p.squeezed)} if p.squeezed is not None else {}),
                }
                for p in self.passages
            ],
            "order": self.order,
            "merged_chunks": self.merged,
            "dropped": self.dropped,
            "tokens": self.tokens,
        }


def overlap_len(a: str, b: str) -> int:
    """Length of the longest end of ``a`` that ``b`` starts with (0 below :data:`MIN_OVERLAP_CHARS`)."""
    for k in range(min(len(a), len(b)), MIN_OVERLAP_CHARS - 1, -1):
        if a.endswith(b[:k]):
            return k
    return 0


def join_texts(a: str, b: str) -> str:
    """``a`` then ``b``, the text ``b`` repeats from the end of ``a`` written once; ``b`` is
    dropped entirely when ``a`` already holds it."""
    if b in a:
        return a
    k = overlap_len(a, b)
    return a + b[k:] if k else a.rstrip() + "\n" + b.lstrip()


def merge_hits(hits: list[Hit]) -> list[list[Hit]]:
    """Groups of hits to merge, in relevance order of each group's best hit: the chunks of one
    document whose ``chunk_no`` are consecutive (a run of neighbours), or whose texts overlap."""
    by_doc: dict[str, list[Hit]] = {}
    for h in hits:
        by_doc.setdefault(h.doc_id, []).append(h)
    groups: list[list[Hit]] = []
    for doc_hits in by_doc.values():
        run: list[Hit] = []
        for h in sorted(doc_hits, key=lambda h: h.chunk_no):
            prev = run[-1] if run else None
            if (
                prev is not None
                and not lines_apart(prev, h)
                and (
                    h.chunk_no == prev.chunk_no + 1
                    or h.chunk_no == prev.chunk_no
                    or overlap_len(prev.content, h.content)
                )
            ):
                run.append(h)
            else:
                if run:
                    groups.append(run)
                run = [h]
        groups.append(run)
    rank = {id(h): i for i, h in enumerate(hits)}
    groups.sort(key=lambda g: min(rank[id(h)] for h in g))
    return groups


def lines_apart(a: Hit, b: Hit) -> bool:
    """Two code chunks whose lines do not meet (a symbol record's signature at line 129, a body at
    316-327): one passage would glue them into one excerpt whose lines the citation numbers from
    the first, so each stays its own passage with its own ``path:start-end``."""
    if not (is_code(a) and is_code(b)):
        return False
    first, second = sorted((a, b), key=lambda h: int(h.metadata["start_line"]))
    end = first.metadata.get("end_line")
    return isinstance(end, int) and int(second.metadata["start_line"]) > end + 1


def lost_in_the_middle(n: int) -> list[int]:
    """Prompt order of passages 1..n: 1, 3, 5, … then …, 6, 4, 2 (strongest at both ends)."""
    front = list(range(1, n + 1, 2))
    back = list(range(2, n + 1, 2))
    return front + back[::-1]


def assemble(
    hits: list[Hit],
    budget_tokens: int = 0,
    merge: bool = True,
    reorder: bool = True,
) -> Assembly:
    """Passages for the prompt from ``hits`` (relevance order). ``budget_tokens`` 0: no budget.

    The most relevant passage is always kept, cut to the budget if it alone exceeds it."""
    groups = merge_hits(hits) if merge else [[h] for h in hits]
    passages: list[Passage] = []
    dropped: list[dict] = []
    used = 0
    for group in groups:
        text = group[0].content
        for h in group[1:]:
            text = join_texts(text, h.content)
        cost = estimate_tokens(text) + PASSAGE_OVERHEAD_TOKENS
        if budget_tokens and used + cost > budget_tokens:
            if passages:
                dropped += [{"doc_id": h.doc_id, "chunk_no": h.chunk_no, "tokens": cost} for h in group]
                continue
            text = cut_to_tokens(text, budget_tokens - PASSAGE_OVERHEAD_TOKENS)
            cost = estimate_tokens(text) + PASSAGE_OVERHEAD_TOKENS
        used += cost
        passages.append(Passage(len(passages) + 1, group, text, max(h.score for h in group), tokens=cost))
    order = lost_in_the_middle(len(passages)) if reorder else list(range(1, len(passages) + 1))
    merged = sum(len(p.hits) - 1 for p in passages)
    return Assembly(passages, order, dropped, merged, used)


def cut_to_tokens(text: str, tokens: int) -> str:
    """The longest start of ``text`` (at a word boundary) estimated at no more than ``tokens``."""
    if estimate_tokens(text) <= tokens:
        return text
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = text.rfind(" ", 0, lo)
    return text[: cut if cut > lo // 2 else lo].rstrip() + " …"


def chunk_for(passage: Passage, said: list[str]) -> Hit:
    """The chunk of ``passage`` behind what an answer ``said`` citing it: the chunk holding most
    of the claimed words (stems), the passage's first chunk on a tie or when nothing matches."""
    if len(passage.hits) == 1:
        return passage.hits[0]
    words: set[str] = set()
    for claim in said:
        words |= stems(claim)
    best, best_n = passage.hits[0], 0
    for h in passage.hits:
        n = len(words & stems(h.content))
        if n > best_n:
            best, best_n = h, n
    return best


# --------------------------------------------------------------------------------------- squeezing
def squeeze(
    assembly: Assembly,
    question: str,
    call: Callable[[str, list[dict]], str],
    min_tokens: int,
    render: Callable[[str, str], str],
) -> tuple[int, list[str]]:
    """Shorten every passage longer than ``min_tokens`` with the generator (``call(system,
    messages)`` → text; ``render(question, passage)`` → the user message). A squeeze that fails
    or returns nothing usable leaves the passage as it was. Returns (passages squeezed, errors)."""
    done, errors = 0, []
    for p in assembly.passages:
        if estimate_tokens(p.text) <= min_tokens:
            continue
        try:
            text = call(SQUEEZE_PROMPT, [{"role": "user", "content": render(question, p.text)}]).strip()
        except QuestionDeadlineExceeded:
            raise
        except Exception as exc:  # the answer call still gets the whole passage
            errors.append(f"squeeze: {type(exc).__name__}")
            continue
        if text and len(text) < len(p.text):
            p.squeezed = text
            done += 1
    return done, errors
