-- Dead letters past mailbox.dead_letter_keep
-- (docs/operations.md, "Redis durability"). Maintenance moves the oldest of the dead-letter stream
-- here, insert first and then XDEL, keyed on the dead letter's id, so a
-- move repeated after a crash adds nothing. GET /deadletters lists the
-- stream and this table as one list; requeue takes a row back to its
-- seat's mailbox and deletes it. Nothing else deletes a row.
CREATE TABLE dead_letters (
    -- the dead letter's id in the Redis stream, split so rows sort as the
    -- stream did
    id          text NOT NULL UNIQUE,
    ms          bigint NOT NULL,
    seq         bigint NOT NULL,
    seat        text NOT NULL,
    reason      text NOT NULL,
    deliveries  bigint NOT NULL,
    -- the entry's id in its seat's mailbox
    stream_id   text NOT NULL,
    at          timestamptz NOT NULL,
    -- the crewlet.Message
    message     jsonb NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ms, seq)
);
