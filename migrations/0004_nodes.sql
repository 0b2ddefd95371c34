-- Presence of worker node incarnations. A node is live while its heartbeat
-- is younger than the host heartbeat timeout and it has not stopped.
CREATE TABLE nodes (
    incarnation  text PRIMARY KEY,
    node_id      text NOT NULL,
    host_queue   text NOT NULL,
    labels       jsonb NOT NULL DEFAULT '{}',
    capacity     integer NOT NULL DEFAULT 0,
    draining     boolean NOT NULL DEFAULT false,
    seats_held   integer NOT NULL DEFAULT 0,
    -- seat handle -> seconds its teardown has been failing
    unproven     jsonb NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz
);

-- The stable node id of a seat's last host, for stickiness across restarts
-- (a restarted node is a new incarnation with the same node id).
ALTER TABLE seats ADD COLUMN preferred_node text NOT NULL DEFAULT '';
