-- Node-level liveness
-- (docs/architecture.md, "Tenure: which node runs a seat"): the failure
-- detector of a live node claims a dead incarnation with one compare-and-set
-- on its row, so exactly one node tells that incarnation's seats their host
-- is gone.
ALTER TABLE nodes
    ADD COLUMN claimed_by text,
    ADD COLUMN claimed_at timestamptz;
-- The detector's question each beat: unclaimed incarnations that stopped or
-- stopped beating.
CREATE INDEX nodes_unclaimed ON nodes (heartbeat_at) WHERE claimed_by IS NULL;
CREATE INDEX seats_node ON seats (node);
