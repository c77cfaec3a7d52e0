"""Keep ``unstructured`` offline.

unstructured 0.27 loads spaCy's ``en_core_web_sm`` on the first partition and tries to
download it when missing, which fails without internet (and would be the wrong language for
Russian anyway). We give it a blank multilingual pipeline with a rule-based sentencizer: all
it needs for its narrative-text heuristics. Called in every process before partitioning.
"""

from __future__ import annotations

import os
import threading
from typing import Any, cast

_lock = threading.Lock()
_installed = False


def install_blank_spacy() -> None:
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")
        os.environ.setdefault("SCARF_NO_ANALYTICS", "true")
        os.environ.setdefault("DO_NOT_TRACK", "true")
        import spacy  # heavy: loads with the first parse
        from unstructured.nlp import tokenize  # after the variables above: unstructured reads them at import

        nlp = spacy.blank("xx")
        nlp.add_pipe("sentencizer")
        nlp.max_length = 5_000_000
        # the module looks it up at call time; it is an lru_cache there, a plain function here
        tokenize._get_nlp = cast(Any, lambda: nlp)
        _installed = True
