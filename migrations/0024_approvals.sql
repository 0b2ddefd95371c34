-- Approvals of gated tool calls and the grants an approve-and-remember
-- leaves (docs/operations.md, "Approvals"). An approval is keyed on its
-- call, the hash of the call's arguments and the digest of its policy, so
-- the same call asked again (a re-run on the next tenure) finds its row,
-- and a call whose arguments or policy changed makes a new one.
CREATE TABLE approvals (
    id             text PRIMARY KEY,
    handle         text NOT NULL,
    -- the turn's workflow id: the same on every run of the same work, so a
    -- decision signals the turn even after a failover
    turn_id        text NOT NULL,
    -- {thread}:{round}:{call}, the call's idempotency key
    call_key       text NOT NULL,
    tool           text NOT NULL,
    args           text NOT NULL,
    args_hash      text NOT NULL,
    role           text NOT NULL,
    policy         text NOT NULL,
    approvers      text[] NOT NULL,
    on_timeout     text NOT NULL,
    -- the tenure that may run the call; a new tenure adopts the row by
    -- raising it
    epoch          bigint NOT NULL,
    status         text NOT NULL DEFAULT 'pending',
    decided_by     text NOT NULL DEFAULT '',
    reason         text NOT NULL DEFAULT '',
    remember_until timestamptz,
    remember_args  boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now(),
    until          timestamptz NOT NULL,
    decided_at     timestamptz
);
CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';
CREATE INDEX approvals_call ON approvals (handle, turn_id, call_key);

CREATE TABLE approval_grants (
    id         bigserial PRIMARY KEY,
    handle     text NOT NULL,
    tool       text NOT NULL,
    -- '' covers any arguments
    args_hash  text NOT NULL,
    policy     text NOT NULL,
    until      timestamptz NOT NULL,
    granted_by text NOT NULL,
    approval   text NOT NULL REFERENCES approvals (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX approval_grants_seat ON approval_grants (handle, tool, until);
