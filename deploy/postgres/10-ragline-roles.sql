-- ragline's database roles: no ragline process connects as a superuser.
--
--   ragline              LOGIN, owner of the database and its schema: runs the migrations and the
--                        ingest and control pools (writes). Not a superuser, cannot create roles or
--                        databases, does not bypass row-level security.
--   ragline_query        NOLOGIN group role of the query pool: SELECT and the row-level security
--                        policies come from migration 0007 (created here too, so that the login role
--                        below can join it before the first migration runs).
--   ragline_query_login  LOGIN, member of ragline_query: RAGLINE_SERVICES_QUERY_DATABASE_URL of the query pool.
--
-- Run once per database as a superuser, with the two passwords in the environment. The postgres image
-- runs it at the first start from /docker-entrypoint-initdb.d (deploy/docker-compose.yml); against any
-- other server (managed Postgres, Kubernetes):
--   RAGLINE_DB_PASSWORD=... RAGLINE_QUERY_DB_PASSWORD=... psql -U postgres -d ragline -f 10-ragline-roles.sql
-- Running it again is safe and sets the passwords anew (rotation).
\set ON_ERROR_STOP on
\set QUIET on
\getenv ragline_password RAGLINE_DB_PASSWORD
\getenv query_password RAGLINE_QUERY_DB_PASSWORD
\if :{?ragline_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'set RAGLINE_DB_PASSWORD (the password of the owner role ragline)'; END $$;
\endif
\if :{?query_password}
\else
  DO $$ BEGIN RAISE EXCEPTION 'set RAGLINE_QUERY_DB_PASSWORD (the password of ragline_query_login)'; END $$;
\endif
SELECT :'ragline_password' = '' OR :'query_password' = '' AS empty_password \gset
\if :empty_password
  DO $$ BEGIN RAISE EXCEPTION 'RAGLINE_DB_PASSWORD and RAGLINE_QUERY_DB_PASSWORD must not be empty'; END $$;
\endif

-- pgvector is not a trusted extension: only a superuser creates it, the migrations then find it
CREATE EXTENSION IF NOT EXISTS vector;
-- row-level security uses a WHERE condition for an index only when its operator is leakproof:
-- without this mark the query role's full-text search reads all of a tenant's rows (operations.md,
-- "Row-level security"); ts_match_vq raises errors only about its query, never about the row
ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;

SELECT 'CREATE ROLE ragline LOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragline') \gexec
ALTER ROLE ragline WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS
  PASSWORD :'ragline_password';

SELECT 'CREATE ROLE ragline_query NOLOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragline_query') \gexec
SELECT 'CREATE ROLE ragline_query_login LOGIN'
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'ragline_query_login') \gexec
ALTER ROLE ragline_query_login WITH LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
  NOBYPASSRLS PASSWORD :'query_password';
SELECT 'GRANT ragline_query TO ragline_query_login'
 WHERE NOT pg_has_role('ragline_query_login', 'ragline_query', 'MEMBER') \gexec

-- the owner owns the database and its schema; nobody else may create objects or connect
SELECT format('ALTER DATABASE %I OWNER TO ragline', current_database()) \gexec
SELECT format('REVOKE ALL ON DATABASE %I FROM PUBLIC', current_database()) \gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO ragline_query', current_database()) \gexec
ALTER SCHEMA public OWNER TO ragline;
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO ragline_query;
