-- A person's mail that no longer fits in Redis
-- (docs/operations.md, "Redis durability"). Maintenance moves the oldest entries of a human seat's
-- mailbox past mailbox.human_keep here, insert first and then XDEL, keyed
-- on the entry's stream id, so a move repeated after a crash adds nothing.
-- The inbox reads Redis and this table as one list. Nothing acks a
-- person's mail, so nothing here is deleted by retention: a row stays until
-- an operator deletes it (the seat's quotas bound how fast it grows).
CREATE TABLE person_mail (
    seat        text NOT NULL,
    -- the entry's Redis stream id, split so rows sort as the stream did
    ms          bigint NOT NULL,
    seq         bigint NOT NULL,
    stream_id   text NOT NULL,
    event_id    text NOT NULL,
    -- the crewlet.Message
    message     jsonb NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, ms, seq),
    -- an event published twice (once to Redis, once here while Redis was
    -- refusing it) is one entry
    UNIQUE (seat, event_id)
);

-- Mail that carries accepted work (a reply, a ticket notice) to a person
-- whose mailbox Redis would not take goes straight here. Its id takes the
-- current millisecond and a sequence number above any Redis assigns in one
-- millisecond, so it sorts after the stream's entries of that moment.
CREATE SEQUENCE person_mail_direct;
