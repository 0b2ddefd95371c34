-- Triggers whose turn finished. Written after the turn's effects shipped and
-- before the mailbox ack; read before a turn starts so a redelivery is skipped.
CREATE TABLE completion_ledger (
    seat        text NOT NULL,
    trigger_key text NOT NULL,
    work_key    text NOT NULL,
    turn_id     text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (seat, trigger_key)
);
CREATE INDEX completion_ledger_recorded_at ON completion_ledger (recorded_at);
