CREATE TABLE conversations (
    id         text PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The transcript. id is the mailbox event id of the message, so re-running a
-- turn re-inserts nothing (ON CONFLICT DO NOTHING).
CREATE TABLE messages (
    id              text PRIMARY KEY,
    conversation_id text NOT NULL REFERENCES conversations (id),
    seq             bigserial NOT NULL,
    type            text NOT NULL,
    sender          text NOT NULL,
    recipient       text NOT NULL,
    body            text NOT NULL,
    in_reply_to     text,
    work_key        text,
    sent_at         timestamptz NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX messages_conversation ON messages (conversation_id, seq);
CREATE INDEX messages_in_reply_to ON messages (in_reply_to) WHERE in_reply_to IS NOT NULL;
