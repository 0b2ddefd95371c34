-- The reconcile duty's idle nudges (docs/operations.md, "Idle nudge") are
-- seat events keyed by the seat's quiet period; each pass asks which of its
-- candidates were already nudged, by event id.
CREATE INDEX IF NOT EXISTS seat_events_idle_nudge ON seat_events (event_id) WHERE kind = 'idle_nudge';
