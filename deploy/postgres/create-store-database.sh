#!/bin/sh
# Creates the agentloop transcript/artifact store's own database on the PostgreSQL server that
# also holds Temporal's `temporal` and `temporal_visibility` databases. Run by the one-shot
# `agentloop-store-init` service of docker-compose.yml on every `docker compose up`: it is
# idempotent, and unlike a /docker-entrypoint-initdb.d script it also works on a volume that
# was initialised before the store existed. The store creates its own tables.
#
# Connection from the standard libpq variables: PGHOST, PGPORT, PGUSER, PGPASSWORD.
set -eu

db="${AGENTLOOP_DB:-agentloop}"

tries=0
until psql -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 30 ]; then
        echo "PostgreSQL at ${PGHOST:-localhost}:${PGPORT:-5432} did not answer" >&2
        exit 1
    fi
    sleep 1
done

psql -d postgres -v ON_ERROR_STOP=1 -v db="$db" <<'SQL'
SELECT format('CREATE DATABASE %I', :'db')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')
\gexec
SQL
echo "store database ${db} is ready on ${PGHOST:-localhost}"
