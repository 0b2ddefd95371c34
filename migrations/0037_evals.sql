-- Eval datasets and runs (docs/architecture.md, "Replay"): a dataset
-- freezes a set of finished turns by id; a run replays each of them with one
-- change and scores the replay with checks, one result row per (run, turn),
-- written once with the run's charges for that turn.
CREATE TABLE eval_datasets (
    name       text PRIMARY KEY,
    -- how the turns were chosen, as the request gave it
    selector   jsonb NOT NULL,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE eval_dataset_turns (
    dataset  text NOT NULL REFERENCES eval_datasets (name) ON DELETE CASCADE,
    position integer NOT NULL,
    turn_id  text NOT NULL,
    PRIMARY KEY (dataset, turn_id)
);

CREATE TABLE eval_runs (
    id          text PRIMARY KEY,
    dataset     text NOT NULL,
    change      jsonb NOT NULL,
    checks      jsonb NOT NULL,
    concurrency integer NOT NULL,
    principal   text NOT NULL,
    -- running, then done or budget_exhausted
    status      text NOT NULL DEFAULT 'running',
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- One row per turn of a run, copied from its dataset when the run starts:
-- pending, then scored, failed (the replay could not run) or refused (the
-- eval budget was spent first).
CREATE TABLE eval_results (
    run           text NOT NULL REFERENCES eval_runs (id) ON DELETE CASCADE,
    turn_id       text NOT NULL,
    position      integer NOT NULL,
    status        text NOT NULL DEFAULT 'pending',
    passed        boolean,
    report        jsonb,
    checks        jsonb,
    error         text NOT NULL DEFAULT '',
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    diverged      integer NOT NULL DEFAULT 0,
    scored_at     timestamptz,
    PRIMARY KEY (run, turn_id)
);

-- The run a replay's charge belongs to; '' for a single replay.
ALTER TABLE eval_usage ADD COLUMN run text NOT NULL DEFAULT '';
