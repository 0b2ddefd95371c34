-- Profile pools, credential health and the model gate
-- (docs/architecture.md, "Profile pools").

-- The profile a turn runs on: picked when it begins, changed only when it
-- fails over.
ALTER TABLE turns ADD COLUMN profile text NOT NULL DEFAULT '';

-- The model the provider said answered a round, when it said.
ALTER TABLE turn_rounds ADD COLUMN answered_model text NOT NULL DEFAULT '';

-- One row per turn run holding a slot of a profile: max_load counts these
-- rows fleet-wide. Keyed on the turn run (its workflow id and the tenure's
-- epoch), so a stale run that releases late never frees the slot of the
-- run that replaced it. A slot whose turn vanished without releasing (a
-- workflow terminated by hand) stops counting at expires_at; every model
-- round pushes it out.
CREATE TABLE profile_slots (
    turn_id     text NOT NULL,
    epoch       bigint NOT NULL,
    seat        text NOT NULL,
    profile     text NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (turn_id, epoch)
);
CREATE INDEX profile_slots_profile ON profile_slots (profile, expires_at);

-- The running scores of each pool's weighted selection (internal/pool),
-- one row per role; its row lock serializes the pool's picks.
CREATE TABLE profile_pools (
    pool   text PRIMARY KEY,
    scores jsonb NOT NULL DEFAULT '{}'
);

-- What is known of each credential's health: a quarantine after a usage
-- limit (escalating) and a cooling-off after repeated other failures
-- (flat). Rows are few: one per credential a refusal or failure was ever
-- reported for.
CREATE TABLE credential_health (
    credential        text PRIMARY KEY,
    quarantine_until  timestamptz,
    attempt           integer NOT NULL DEFAULT 0,
    quarantine_reason text NOT NULL DEFAULT '',
    cooling_until     timestamptz,
    cooling_reason    text NOT NULL DEFAULT '',
    last_failure      timestamptz,
    last_failure_turn text NOT NULL DEFAULT '',
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- Models switched off at runtime (POST /models/{id}/disable). A row with
-- disabled false records who switched it back on.
CREATE TABLE model_switches (
    model    text PRIMARY KEY,
    disabled boolean NOT NULL,
    by_whom  text NOT NULL,
    reason   text NOT NULL DEFAULT '',
    at       timestamptz NOT NULL DEFAULT now()
);

-- Turns held because no profile of their pool can take them, oldest first:
-- a freed slot or a model switched back on wakes them by a signal.
CREATE TABLE profile_waiters (
    turn_id  text PRIMARY KEY,
    -- the waiting run's tenure: a stale run never removes its successor's row
    epoch    bigint NOT NULL,
    profiles text[] NOT NULL,
    since    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX profile_waiters_since ON profile_waiters (since);

-- The model a provider said answered, per profile, when it differed from the
-- configured one: shown by GET /profiles.
CREATE TABLE profile_answers (
    profile    text PRIMARY KEY,
    configured text NOT NULL,
    answered   text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
