-- Delegation tickets (docs/architecture.md, "Delegation: tickets"). Every
-- phase change is one statement that names the phases it may leave, so a
-- phase never goes backwards except asking -> pending.
CREATE TABLE tickets (
    id            text PRIMARY KEY,
    -- what created it (a tool call's idempotency key, an API request's
    -- id): creating again with the same key returns the same ticket
    create_key    text NOT NULL UNIQUE,
    from_handle   text NOT NULL,
    from_seat     boolean NOT NULL,
    to_handle     text NOT NULL,
    routed_from   text NOT NULL DEFAULT '',
    task          text NOT NULL,
    conversation  text NOT NULL,
    phase         text NOT NULL DEFAULT 'pending'
                  CHECK (phase IN ('pending', 'asking', 'done', 'failed', 'cancelled', 'expired')),
    question      text NOT NULL DEFAULT '',
    asked_at      timestamptz,
    answer        text NOT NULL DEFAULT '',
    reply         text NOT NULL DEFAULT '',
    reason        text NOT NULL DEFAULT '',
    request_event text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz
);
CREATE INDEX tickets_open_to ON tickets (to_handle) WHERE phase IN ('pending', 'asking');
CREATE INDEX tickets_from ON tickets (from_handle, created_at DESC);
CREATE INDEX tickets_to ON tickets (to_handle, created_at DESC);
CREATE INDEX tickets_created ON tickets (created_at);
