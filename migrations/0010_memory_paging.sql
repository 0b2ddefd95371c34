-- GET /seats/{handle}/memory pages a seat's diary and episodes newest first
-- by id; without these it scans every seat's rows.
CREATE INDEX agent_diary_seat_id ON agent_diary (seat, id DESC);
CREATE INDEX episodes_seat_id ON episodes (seat, id DESC);
