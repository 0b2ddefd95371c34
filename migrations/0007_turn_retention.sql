-- Indexes the maintenance duty's retention deletes use: turn records older
-- than maintenance.turn_retention, token counters of long-past windows.
CREATE INDEX turns_finished ON turns (COALESCE(finished_at, started_at));
CREATE INDEX turn_messages_created ON turn_messages (created_at);
CREATE INDEX turn_rounds_recorded ON turn_rounds (recorded_at);
CREATE INDEX tool_calls_started ON tool_calls (started_at);
CREATE INDEX usage_counters_window_start ON usage_counters (window_start);
