"""Extractive answers over code chunks quote a docstring's prose, never its quotes."""

from __future__ import annotations

from ragline.query.answer.extractive import extractive_answer, prose_sentences
from ragline.shared.sdk.contracts import Hit

MODULE = '''"""Hooks: callbacks are remembered per event and run in registration order.
"""

HOOKS = {}


def register_hook(event, hook):
    """Remember a callback for an event, in the order of registration."""
    HOOKS.setdefault(event, []).append(hook)


def clear_hooks(event):
    r\'\'\'Forget every callback registered for an event at once.

    The remaining events keep their callbacks untouched.
    \'\'\'
    HOOKS.pop(event, None)
'''


def test_docstring_sentences_lose_their_quotes():
    sentences = prose_sentences(MODULE)
    assert sentences == [
        "Hooks: callbacks are remembered per event and run in registration order.",
        "Remember a callback for an event, in the order of registration.",
        "Forget every callback registered for an event at once.",
        "The remaining events keep their callbacks untouched.",
    ]


def test_an_answer_over_code_quotes_no_delimiters():
    hit = Hit(doc_id="r/pkg/hooks.py", chunk_no=0, path="r/pkg/hooks.py", content=MODULE)
    answer = extractive_answer("Where is a callback remembered for an event?", [hit])
    assert "Remember a callback for an event, in the order of registration." in answer
    assert '"' not in answer and "'" not in answer
    assert answer.endswith("[1]")
