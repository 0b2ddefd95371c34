-- One row per seat the org has ever had. epoch is the seat's fencing token:
-- bumped by Attach in one statement, never reset, never decreased.
CREATE TABLE seats (
    handle      text PRIMARY KEY,
    role        text NOT NULL DEFAULT '',
    kind        text NOT NULL DEFAULT 'agent',
    epoch       bigint NOT NULL DEFAULT 0,
    node        text NOT NULL DEFAULT '',
    -- stamped only when a tenure starts (Attach), never by anything else
    acquired_at timestamptz,
    -- lifecycle as last recorded by the seat workflow (establishing, active,
    -- paused, drained, stopped); the live status is the workflow's state query
    status      text NOT NULL DEFAULT 'new',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Registry of Redis mailboxes, so a removed seat's stream can be retired after
-- a grace period under compare-and-set on this row.
CREATE TABLE mailboxes (
    seat          text PRIMARY KEY,
    stream        text NOT NULL,
    consumer_group text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    missing_since timestamptz
);
