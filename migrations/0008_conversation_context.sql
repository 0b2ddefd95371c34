-- Conversations the model remembers (docs/architecture.md, "A turn").

-- A compaction summary: one model call that replaced a seat's oldest
-- exchanges of a conversation. Keyed on the last message it covers, so it is
-- made once and reused by every later turn and every re-run. A seat's view of
-- a conversation is its own (what it was sent and what it answered), hence
-- the seat in the key.
CREATE TABLE conversation_summaries (
    seat          text NOT NULL,
    conversation  text NOT NULL,
    -- messages.id and messages.seq of the last message the summary covers
    through_id    text NOT NULL,
    through_seq   bigint NOT NULL,
    -- how many of the seat's exchanges it covers, including those an
    -- earlier summary it folded in covered
    covered       integer NOT NULL,
    summary       text NOT NULL,
    profile       text NOT NULL,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, conversation, through_id)
);
CREATE INDEX conversation_summaries_latest ON conversation_summaries (seat, conversation, through_seq DESC);
CREATE INDEX conversation_summaries_created ON conversation_summaries (created_at);

-- A seat's part of a conversation is read by recipient.
CREATE INDEX messages_conversation_recipient ON messages (conversation_id, recipient, seq);

-- The bytes of context a round sent; with the provider's reported input
-- tokens it calibrates the token estimate of the next context.
ALTER TABLE turn_rounds ADD COLUMN context_bytes bigint NOT NULL DEFAULT 0;

-- A diary entry a post-turn reflection wrote is keyed on the turn's work, so
-- a reflection re-run after a crash writes once.
ALTER TABLE agent_diary ADD COLUMN work_key text;
CREATE UNIQUE INDEX agent_diary_seat_work_key ON agent_diary (seat, work_key) WHERE work_key IS NOT NULL;
