-- Durable waits on tickets (docs/architecture.md, "Delegation: tickets"). A
-- turn that waits names itself here by its workflow id, which is the same on
-- every run of the same work, so whoever ends the wait signals it even after
-- a failover.
ALTER TABLE tickets
    -- the delegator's turn waiting for the ticket to settle or ask
    ADD COLUMN waiter     text NOT NULL DEFAULT '',
    -- the serving turn waiting for the answer to its question
    ADD COLUMN ask_waiter text NOT NULL DEFAULT '',
    -- the ask call that put the question: asking again from that same call
    -- (a re-run) is the same question
    ADD COLUMN ask_key    text NOT NULL DEFAULT '';
CREATE INDEX tickets_waiter ON tickets (waiter) WHERE waiter <> '';
CREATE INDEX tickets_ask_waiter ON tickets (ask_waiter) WHERE ask_waiter <> '';
