-- A2A push notifications: a task's webhooks, and the outbox of the
-- notifications owed to them
-- (docs/operations.md, "Push notifications").
--
-- A config belongs to a ticket (an A2A task is a ticket) and goes with it.
CREATE TABLE a2a_push_configs (
    ticket           text NOT NULL REFERENCES tickets (id) ON DELETE CASCADE,
    id               text NOT NULL,
    url              text NOT NULL,
    -- sent as X-A2A-Notification-Token, and the key of the signature
    token            text NOT NULL,
    auth_scheme      text NOT NULL DEFAULT '',
    auth_credentials text NOT NULL DEFAULT '',
    created_by       text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ticket, id)
);

-- One row per notification owed: a state change of a ticket, to one of its
-- configs. The row holds the ticket as it stood at the change, so each
-- notification shows its own state however late it is sent. A dispatcher
-- in each API process claims due rows (FOR UPDATE SKIP LOCKED), a config's
-- oldest first, and pushes next_at out while it posts: a process that dies
-- mid-post leaves the row to another once that lease passes.
CREATE TABLE a2a_push_outbox (
    id           bigserial PRIMARY KEY,
    ticket       text NOT NULL,
    config       text NOT NULL,
    task         jsonb NOT NULL,
    attempts     int NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL DEFAULT now(),
    last_error   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    gave_up_at   timestamptz,
    FOREIGN KEY (ticket, config) REFERENCES a2a_push_configs (ticket, id) ON DELETE CASCADE
);
CREATE INDEX a2a_push_outbox_due ON a2a_push_outbox (next_at)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX a2a_push_outbox_config ON a2a_push_outbox (ticket, config, id)
    WHERE delivered_at IS NULL AND gave_up_at IS NULL;
CREATE INDEX a2a_push_outbox_finished ON a2a_push_outbox (created_at)
    WHERE delivered_at IS NOT NULL OR gave_up_at IS NOT NULL;

-- The notification is recorded by a trigger in the statement that changes
-- the ticket's phase: every store function that moves a phase (settle, end,
-- expire, ask, answer, stop asking, fail a removed seat's) and any later one
-- records it without knowing of push, and a change that rolls back records
-- nothing.
CREATE OR REPLACE FUNCTION crewlet_a2a_push_owed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO a2a_push_outbox (ticket, config, task)
    SELECT NEW.id, c.id, crewlet_a2a_push_task(NEW)
    FROM a2a_push_configs c WHERE c.ticket = NEW.id;
    RETURN NULL;
END
$$;

-- The ticket's fields an A2A task shows, named as crewlet.Ticket's JSON.
CREATE OR REPLACE FUNCTION crewlet_a2a_push_task(t tickets) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', t.id, 'to', t.to_handle, 'task', t.task, 'conversation', t.conversation,
        'phase', t.phase, 'question', t.question, 'answer', t.answer, 'reply', t.reply, 'reason', t.reason,
        'updated_at', t.updated_at)
$$;

CREATE TRIGGER tickets_phase_a2a_push AFTER UPDATE OF phase ON tickets
    FOR EACH ROW WHEN (OLD.phase IS DISTINCT FROM NEW.phase)
    EXECUTE FUNCTION crewlet_a2a_push_owed();
