-- Seat authority (docs/operations.md, "Authentication and authority").
--
-- A ticket carries its delegation chain: hops counts the delegations that
-- led to it (1 for one opened by a person, or by a turn that serves no
-- ticket) and chain names their delegators in order, so a seat already on
-- it is never delegated to again and tickets.max_hops bounds its length.
-- A ticket opened before this had no chain: it is its own first hop.
ALTER TABLE tickets
    ADD COLUMN hops  integer NOT NULL DEFAULT 1,
    ADD COLUMN chain text[]  NOT NULL DEFAULT '{}';
UPDATE tickets SET chain = ARRAY[from_handle];

-- A tool call's row is now written when the call is admitted under its
-- turn's caps (roles.R.max_tool_calls_per_turn, max_messages_per_turn),
-- which may be long before it starts (an approval wait). started says the
-- call itself began: a second start of a write finds it true and knows an
-- earlier attempt may have reached outside. Rows written before this were
-- written at the start. Whatever writes a row names started.
ALTER TABLE tool_calls ADD COLUMN started boolean NOT NULL DEFAULT true;
