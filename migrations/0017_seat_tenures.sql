-- Each beat a node asks which tenures began since its last beat, anywhere,
-- to end its own that moved on; the index keeps that question O(tenures
-- begun), not O(seats).
CREATE INDEX seats_acquired_at ON seats (acquired_at);
