-- What happened to a seat that a person may need to see: skipped triggers,
-- dead letters, requeues. Newest first by id.
CREATE TABLE seat_events (
    id          bigserial PRIMARY KEY,
    seat        text NOT NULL,
    kind        text NOT NULL,
    event_id    text,
    detail      jsonb NOT NULL DEFAULT '{}',
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX seat_events_seat ON seat_events (seat, id DESC);

-- Seat memory. Every write is one statement keyed on the work, so a turn run
-- twice (a redelivery, two nodes) remembers once.
CREATE TABLE episodes (
    id          bigserial PRIMARY KEY,
    seat        text NOT NULL,
    -- NULL for a turn with no ledgerable trigger: never deduplicated
    work_key    text,
    turn_id     text NOT NULL,
    summary     text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX episodes_seat_work_key ON episodes (seat, work_key);

CREATE TABLE counterparty_profiles (
    seat              text NOT NULL,
    counterparty      text NOT NULL,
    interaction_count bigint NOT NULL DEFAULT 0,
    -- the work key last counted: the same work counted again adds nothing
    last_work_key     text,
    first_seen        timestamptz NOT NULL DEFAULT now(),
    last_seen         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, counterparty)
);

CREATE TABLE agent_diary (
    id           bigserial PRIMARY KEY,
    seat         text NOT NULL,
    content      text NOT NULL,
    content_hash bytea NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX agent_diary_seat_content ON agent_diary (seat, content_hash);
