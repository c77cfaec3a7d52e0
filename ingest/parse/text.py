"""Plain text through ``partition_text``; it has no markup, so guessed titles are checked."""

from __future__ import annotations


def elements(text: str) -> tuple[list, str]:
    """unstructured elements of a plain-text document; the title comes from its headings."""
    from unstructured.partition.text import partition_text  # parse package stays light: loads per format

    return [_demote_sentence_title(el) for el in partition_text(text=text, languages=[""])], ""


def _demote_sentence_title(el):
    """Plain text has no markup: a "title" guessed by unstructured that ends like a sentence is text."""
    from unstructured.documents.elements import Text  # parse package stays light: loads per format

    if type(el).__name__ == "Title" and el.text.rstrip().endswith((".", "!", "?", ";", ",")):
        new = Text(el.text)
        new.metadata = el.metadata
        return new
    return el
