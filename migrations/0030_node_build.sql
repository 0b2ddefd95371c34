-- The worker build a node incarnation runs (temporal.deployment.build_id), so a
-- node can tell from crewlet's own presence rows whether any node of a build is
-- alive, and GET /nodes shows which build each node runs. '' for a node started
-- before this column.
ALTER TABLE nodes ADD COLUMN build_id text NOT NULL DEFAULT '';
