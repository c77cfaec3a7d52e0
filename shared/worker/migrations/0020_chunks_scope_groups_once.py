"""The chunks policy of migration 0007 reads the caller's groups once per statement, not once per row.

0007's policy compares each row's ACL with ``NULLIF(current_setting('ragline.groups', true),
'')::text[]``. Postgres does not keep the value of that expression between rows: every row an exact
vector search reads parsed the setting into an array again (``array_in``) and looked the setting up
(``current_setting``), about a fifth of that search's time over the 9,000 rows of a caller in a
million-row table (bench f).

The policy now reads the groups through a sub-select, which Postgres evaluates once per statement
(an init plan). A sub-select's value is unknown to the planner, and ``&&`` would estimate it at its
default 1 % selectivity, multiplied into the estimate the statement's own ``WHERE acl && <groups>``
already gives from the column's statistics; a tenant that looks a hundred times smaller would be read
in full for the 50 rows of the final join (a hash join instead of primary-key lookups) or sorted in
full instead of walked through HNSW. So the policy compares through ``&&&``: the same function as
``&&`` (``arrayoverlap``), whose estimate is "keeps almost every row" (``neqsel``): the policy is the
second wall, and the ``WHERE`` of every retrieval statement is what estimates (and indexes) the ACL.
``&&&`` belongs to no index operator class, which costs nothing here: ``chunks.acl`` has no index
(migration 0003), and the exact path of a caller starts at the ``documents`` ACL index, whose policy
keeps the direct form that index serves (a few hundred documents, not thousands of rows).

Semantics are unchanged: unset or empty settings make the sub-select NULL and admit no row.
"""

from yoyo import step

__depends__ = {"0019_source_selection"}

TENANT = "tenant = NULLIF(current_setting('ragline.tenant', true), '')"
OLD = TENANT + " AND acl && NULLIF(current_setting('ragline.groups', true), '')::text[]"
NEW = TENANT + " AND acl &&& (SELECT NULLIF(current_setting('ragline.groups', true), '')::text[])"

steps = [
    step(
        "CREATE OPERATOR &&& (FUNCTION = arrayoverlap, LEFTARG = anyarray, RIGHTARG = anyarray, RESTRICT = neqsel)",
        "DROP OPERATOR IF EXISTS &&& (anyarray, anyarray)",
    ),
    step(
        f"ALTER POLICY chunks_query_scope ON chunks USING ({NEW})",
        f"ALTER POLICY chunks_query_scope ON chunks USING ({OLD})",
    ),
]
