-- Config revisions (docs/architecture.md, "Config revisions"): every org
-- file applied, numbered from 1; the highest is the active revision, which
-- every process follows. The document holds env var names, never secrets.
CREATE TABLE config_revisions (
    revision   bigint PRIMARY KEY,
    document   text NOT NULL,
    digest     text NOT NULL,
    applied_by text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    changes    jsonb NOT NULL DEFAULT '[]'
);
CREATE INDEX config_revisions_digest ON config_revisions (digest);

-- Which revision each server process runs, and which cold keys it runs
-- without (it needs a restart to take them). A process writes its row when
-- it takes a revision and on every beat.
CREATE TABLE config_processes (
    process       text PRIMARY KEY,
    kind          text NOT NULL,
    revision      bigint NOT NULL,
    needs_restart text[] NOT NULL DEFAULT '{}',
    problem       text NOT NULL DEFAULT '',
    started_at    timestamptz NOT NULL DEFAULT now(),
    seen_at       timestamptz NOT NULL DEFAULT now()
);
