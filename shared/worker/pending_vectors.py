"""Which rows get vectors and which still await them: the one definition of the embedding budget
and of "not yet embedded".

A document stored searchable before it is embedded (``RAGLINE_INGEST_DEFER_VECTORS``) has rows
with a NULL ``embedding`` (and ``embed_model``) until the fill task on the ingest pool writes
them; the vector search skips them, the lexical search finds them. Rows of a layer the budget keeps
lexical (``RAGLINE_INGEST_LEXICAL_ONLY_LAYERS``, :class:`VectorBudget`) are never embedded, by the
ingest or by the fill: they are searchable lexically and structurally for good, so they are not
"awaiting" anything and must not make a search or ``ragline status`` report a fill that will never
come. Search responses count both kinds in the caller's scope, ``ragline status`` per tenant; the
partial index of migration 0016 keeps both counts to the rows without a vector, and the one of 0021
lets the fill find its rows among them by layer (:data:`FILL_PREDICATE`).

The rule lives here, below both pools, because the ingest side (what to embed, what the fill
picks) and the query side (what a search reports as not yet embedded) must read the same one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg.rows import DictRow

from ragline.shared.config.settings import Settings, get_settings

#: a chunk row that has no vector yet and will get one (``c`` is the chunks alias of every statement
#: using it; :meth:`VectorBudget.params` binds the layers)
PREDICATE = "c.embedding IS NULL AND c.layer <> ALL(%(lexical_only_layers)s::text[])"
#: a chunk row without a vector that the budget never embeds
LEXICAL_ONLY = "c.embedding IS NULL AND c.layer = ANY(%(lexical_only_layers)s::text[])"
#: :data:`PREDICATE`'s rows as the vector fill selects them across tenants: ``fill_layers`` bound to
#: :func:`fill_layers` (the layers holding rows without a vector, less the lexical ones), so the index
#: of migration 0021 finds them; ``<> ALL`` cannot use an index, and with whole layers kept lexical
#: most rows without a vector are not the fill's
FILL_PREDICATE = "c.embedding IS NULL AND c.layer = ANY(%(fill_layers)s::text[])"

# the distinct layers of the rows without a vector, one probe of chunks_awaiting_by_layer each
# (a loose index scan: a DISTINCT would read every such row)
LAYERS_WITHOUT_VECTORS_SQL = """
WITH RECURSIVE l(layer) AS (
    (SELECT c.layer FROM chunks c WHERE c.embedding IS NULL ORDER BY c.layer LIMIT 1)
    UNION ALL
    SELECT (SELECT c.layer FROM chunks c WHERE c.embedding IS NULL AND c.layer > l.layer
            ORDER BY c.layer LIMIT 1)
    FROM l WHERE l.layer IS NOT NULL
)
SELECT layer FROM l WHERE layer IS NOT NULL
"""


@dataclass(frozen=True)
class VectorBudget:
    """The layers whose rows are kept lexical + structural (never embedded); every other row is
    embedded, at ingest or by the fill. A layer added to the list keeps the vectors its rows already
    have until they are stored again; one taken off it is picked up by the next fill."""

    lexical_only: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> VectorBudget:
        return cls(frozenset((settings or get_settings()).ingest.lexical_only_layers))

    def embeds(self, layer: str) -> bool:
        """Whether rows of ``layer`` get vectors."""
        return layer not in self.lexical_only

    def mask(self, layers: Iterable[str]) -> list[bool]:
        """Per row (by its layer), whether it gets a vector."""
        return [self.embeds(layer) for layer in layers]

    def params(self) -> dict[str, list[str]]:
        """The statement parameters :data:`PREDICATE` and :data:`LEXICAL_ONLY` read."""
        return {"lexical_only_layers": sorted(self.lexical_only)}


def fill_layers(conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None) -> list[str]:
    """The layers holding rows that await their vectors (any tenant): :data:`FILL_PREDICATE`'s
    ``fill_layers``; empty when no row awaits one, so an idle fill reads nothing more."""
    budget = budget or VectorBudget.from_settings()
    return [
        r["layer"] for r in conn.execute(LAYERS_WITHOUT_VECTORS_SQL).fetchall() if budget.embeds(r["layer"])
    ]


def by_tenant(conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None) -> dict[str, int]:
    """Rows awaiting their vectors, per tenant (tenants with none are left out): read by layer
    (:data:`FILL_PREDICATE`), so a wait for the fill polling this does not read every lexical-only
    row each time."""
    layers = fill_layers(conn, budget)
    if not layers:
        return {}
    rows = conn.execute(
        f"SELECT c.tenant, count(*) AS n FROM chunks c WHERE {FILL_PREDICATE} GROUP BY c.tenant",
        {"fill_layers": layers},
    ).fetchall()
    return {r["tenant"]: int(r["n"]) for r in rows}


def counts_by_tenant(
    conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None
) -> dict[str, dict[str, int]]:
    """``{"awaiting": {tenant: rows}, "lexical_only": {tenant: rows}}``: rows the fill will embed
    and rows the budget keeps lexical, per tenant, in one pass over the rows without a vector."""
    budget = budget or VectorBudget.from_settings()
    rows = conn.execute(
        f"SELECT c.tenant, count(*) FILTER (WHERE {PREDICATE}) AS awaiting,"
        f" count(*) FILTER (WHERE {LEXICAL_ONLY}) AS lexical_only"
        " FROM chunks c WHERE c.embedding IS NULL GROUP BY c.tenant ORDER BY c.tenant",
        budget.params(),
    ).fetchall()
    return {
        kind: {r["tenant"]: int(r[kind]) for r in rows if r[kind]} for kind in ("awaiting", "lexical_only")
    }
