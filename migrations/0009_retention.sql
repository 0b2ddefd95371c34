-- Indexes the maintenance duty's retention deletes use (store.TrimRetention):
-- each record kind older than its maintenance.*_retention.
CREATE INDEX messages_recorded ON messages (recorded_at);
CREATE INDEX conversations_created ON conversations (created_at);
CREATE INDEX seat_events_recorded ON seat_events (recorded_at);
CREATE INDEX agent_diary_recorded ON agent_diary (recorded_at);
CREATE INDEX episodes_recorded ON episodes (recorded_at);
-- conversation_summaries (created_at) is indexed by 0008. Left unindexed on
-- purpose: counterparty_profiles.last_seen and nodes.heartbeat_at are
-- rewritten on every interaction and every heartbeat, and an index on them
-- would make each of those updates write the index too; both tables hold a
-- row per (seat, counterparty) or per node incarnation, small enough to scan.
