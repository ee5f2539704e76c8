#!/bin/sh
# Run once by the postgres image on an empty data directory (/docker-entrypoint-initdb.d), as
# POSTGRES_USER (`registry`, the owner: a superuser, used only by `migrate`). Issue 36:
#   registry_app           what web, workers and beat connect as: no superuser, no role
#                          administration, reads and writes the tables `registry` creates;
#   registry_audit_pruner  holds the audit prune's exception (audit migration 0005);
#   registry_pruner        logs in as a member of it: only `docker compose run --rm prune` has it.
# A superuser is a member of every role, so the application's role must not be one, or it could
# delete audit rows like the pruner. docs/operations.md, "Database roles", has the same SQL for
# an existing database and for Kubernetes.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v app_password="$POSTGRES_APP_PASSWORD" -v prune_password="$AUDIT_PRUNE_PASSWORD" <<'SQL'
CREATE ROLE registry_app LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'app_password';
CREATE ROLE registry_audit_pruner NOLOGIN;
CREATE ROLE registry_pruner LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE IN ROLE registry_audit_pruner
  PASSWORD :'prune_password';
GRANT CONNECT ON DATABASE registry TO registry_app, registry_pruner;
GRANT USAGE ON SCHEMA public TO registry_app, registry_audit_pruner;
-- Tables and sequences `migrate` creates (as registry) from now on.
ALTER DEFAULT PRIVILEGES FOR ROLE registry IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO registry_app;
ALTER DEFAULT PRIVILEGES FOR ROLE registry IN SCHEMA public
  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO registry_app;
ALTER DEFAULT PRIVILEGES FOR ROLE registry IN SCHEMA public
  GRANT SELECT, DELETE ON TABLES TO registry_audit_pruner;
ALTER DEFAULT PRIVILEGES FOR ROLE registry IN SCHEMA public
  GRANT INSERT ON TABLES TO registry_audit_pruner;
ALTER DEFAULT PRIVILEGES FOR ROLE registry IN SCHEMA public
  GRANT USAGE ON SEQUENCES TO registry_audit_pruner;
SQL
