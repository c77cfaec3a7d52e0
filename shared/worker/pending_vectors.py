"""Which rows get vectors and which still await them: the one definition of the embedding budget
and of "not yet embedded".

A document stored searchable before it is embedded (``RAGLINE_INGEST_DEFER_VECTORS``) has rows
with a NULL ``embedding`` (and ``embed_model``) until the fill task on the ingest pool writes
them; the vector search skips them, the lexical search finds them. Rows of a layer the budget keeps
lexical (``RAGLINE_INGEST_LEXICAL_ONLY_LAYERS``, :class:`VectorBudget`) are never embedded, by the
ingest or by the fill: they are searchable lexically and structurally for good, so they are not
"awaiting" anything and must not make a search or ``ragline status`` report a fill that will never
come. Search responses count the awaiting rows in the caller's scope (and the lexical-only ones
while some await), ``ragline status`` both kinds per tenant. ``<> ALL`` (:data:`PREDICATE`) is
the rule, but no index serves it: searches count by :meth:`VectorBudget.awaiting` (ranges of layers,
the partial index of migration 0022) and the fill finds its rows by layer (:data:`FILL_PREDICATE`,
migration 0021), so neither reads the rows the budget keeps lexical.

The rule lives here, below both pools, because the ingest side (what to embed, what the fill
picks) and the query side (what a search reports as not yet embedded) must read the same one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

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
        """The statement parameters :data:`PREDICATE`, :data:`LEXICAL_ONLY` and :meth:`awaiting`
        read: the lexical-only layers in code-point order, the order of ``COLLATE "C"``."""
        return {"lexical_only_layers": sorted(self.lexical_only)}

    def awaiting(self) -> str:
        """:data:`PREDICATE` as the ranges of layers between the lexical-only ones, which the index
        of migration 0022 (tenant, layer in "C" order, rows without a vector) reads as a few range
        scans, visiting only the rows that await their vectors; ``<> ALL`` would visit each
        lexical-only row of the scope. The bounds are elements of :meth:`params`'s sorted array,
        so the statement's text depends only on how many layers the budget keeps lexical."""
        layer = 'c.layer COLLATE "C"'
        bounds = [f"(%(lexical_only_layers)s::text[])[{i}]" for i in range(1, len(self.lexical_only) + 1)]
        if not bounds:
            return "c.embedding IS NULL"
        ranges = [
            f"{layer} < {bounds[0]}",
            *(f"({layer} > {low} AND {layer} < {high})" for low, high in pairwise(bounds)),
            f"{layer} > {bounds[-1]}",
        ]
        return f"c.embedding IS NULL AND ({' OR '.join(ranges)})"


def fill_layers(conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None) -> list[str]:
    """The layers holding rows that await their vectors (any tenant): :data:`FILL_PREDICATE`'s
    ``fill_layers``; empty when no row awaits one, so an idle fill reads nothing more."""
    budget = budget or VectorBudget.from_settings()
    return [
        r["layer"] for r in conn.execute(LAYERS_WITHOUT_VECTORS_SQL).fetchall() if budget.embeds(r["layer"])
    ]


def by_tenant(
    conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None, layers: Iterable[str] | None = None
) -> dict[str, int]:
    """Rows awaiting their vectors, per tenant (tenants with none are left out), of ``layers`` only
    when given: read by layer (:data:`FILL_PREDICATE`), so a wait for the fill polling this does not
    read every lexical-only row each time."""
    wanted = None if layers is None else set(layers)
    found = [la for la in fill_layers(conn, budget) if wanted is None or la in wanted]
    if not found:
        return {}
    rows = conn.execute(
        f"SELECT c.tenant, count(*) AS n FROM chunks c WHERE {FILL_PREDICATE} GROUP BY c.tenant",
        {"fill_layers": found},
    ).fetchall()
    return {r["tenant"]: int(r["n"]) for r in rows}


def counts_by_tenant(
    conn: psycopg.Connection[DictRow], budget: VectorBudget | None = None
) -> dict[str, dict[str, int]]:
    """``{"awaiting": {tenant: rows}, "lexical_only": {tenant: rows}}``: rows the fill will embed
    and rows the budget keeps lexical, per tenant. The rows without a vector are counted per tenant
    and layer (the index of migration 0022, read without the table once vacuum has marked its pages)
    and each layer is judged by :meth:`VectorBudget.embeds`, the rule :data:`PREDICATE` states."""
    budget = budget or VectorBudget.from_settings()
    out: dict[str, dict[str, int]] = {"awaiting": {}, "lexical_only": {}}
    for r in conn.execute(
        'SELECT c.tenant, c.layer COLLATE "C" AS layer, count(*) AS n FROM chunks c'
        ' WHERE c.embedding IS NULL GROUP BY c.tenant, c.layer COLLATE "C" ORDER BY 1, 2'
    ).fetchall():
        kind = out["awaiting" if budget.embeds(r["layer"]) else "lexical_only"]
        kind[r["tenant"]] = kind.get(r["tenant"], 0) + int(r["n"])
    return out
