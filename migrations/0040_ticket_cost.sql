-- What a ticket cost (docs/architecture.md, "Cost"): the rounds of the
-- thread that served it plus what its sub-tickets cost, at any depth.
--
-- parent is the ticket the delegating turn served when it opened this one
-- ('' for a person's ticket, or a turn that served none): the tree the cost
-- rolls up. A ticket has one parent, set when it is created and never
-- changed, so the tree has no cycle and each ticket is counted once.
-- Tickets opened before this have no parent: each is its own root.
--
-- serve_key is the work key of the thread that serves it on its seat
-- (crewlet.ThreadKey of request_event): its rounds are the turn_rounds rows
-- of (to_handle, serve_key), read through that table's primary key.
ALTER TABLE tickets
    ADD COLUMN parent    text NOT NULL DEFAULT '',
    ADD COLUMN serve_key text NOT NULL DEFAULT '';
-- crewlet.ThreadKey in SQL, once, for the tickets already there: the first
-- 32 hex digits of the sha-256 of the request's event id and a zero byte.
UPDATE tickets SET serve_key = left(encode(sha256(convert_to(request_event, 'UTF8') || '\x00'::bytea), 'hex'), 32);
CREATE INDEX tickets_parent ON tickets (parent) WHERE parent <> '';
