-- An approval asked by a turn that serves a ticket names that ticket, so the
-- ticket's A2A task can say it waits for input (an approver's decision), and
-- whoever follows the ticket is woken when its approval is asked or decided:
-- the same notification as a phase change (0029), in the same transaction.
ALTER TABLE approvals ADD COLUMN ticket text NOT NULL DEFAULT '';

CREATE INDEX approvals_ticket_pending ON approvals (ticket) WHERE status = 'pending' AND ticket <> '';

CREATE OR REPLACE FUNCTION crewlet_approval_ticket_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crewlet_ticket', NEW.ticket);
    RETURN NULL;
END
$$;

CREATE TRIGGER approvals_ticket_notify AFTER INSERT OR UPDATE OF status ON approvals
    FOR EACH ROW WHEN (NEW.ticket <> '')
    EXECUTE FUNCTION crewlet_approval_ticket_changed();

-- The ticket's A2A task goes input-required when an approval its serving
-- turn asked is pending, and working again once the last one is decided:
-- a state change, owed to each of the ticket's push configs (0033) as a
-- phase change is. The approval travels in the notification's task, so
-- the notification shows what waits. A decision while another approval of
-- the ticket is pending (one superseded by a newer ask) changes no state.
CREATE OR REPLACE FUNCTION crewlet_approval_a2a_push_owed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status <> 'pending' AND EXISTS (SELECT 1 FROM approvals a WHERE a.ticket = NEW.ticket AND a.status = 'pending') THEN
        RETURN NULL;
    END IF;
    INSERT INTO a2a_push_outbox (ticket, config, task)
    SELECT t.id, c.id, crewlet_a2a_push_task(t) || CASE WHEN NEW.status = 'pending' THEN
            jsonb_build_object('approval', jsonb_build_object('id', NEW.id, 'tool', NEW.tool, 'approvers', NEW.approvers, 'created_at', NEW.created_at))
        ELSE '{}'::jsonb END
    FROM tickets t JOIN a2a_push_configs c ON c.ticket = t.id
    WHERE t.id = NEW.ticket AND t.phase = 'pending';
    RETURN NULL;
END
$$;

CREATE TRIGGER approvals_a2a_push_asked AFTER INSERT ON approvals
    FOR EACH ROW WHEN (NEW.ticket <> '' AND NEW.status = 'pending')
    EXECUTE FUNCTION crewlet_approval_a2a_push_owed();

CREATE TRIGGER approvals_a2a_push_decided AFTER UPDATE OF status ON approvals
    FOR EACH ROW WHEN (NEW.ticket <> '' AND OLD.status = 'pending' AND NEW.status <> 'pending')
    EXECUTE FUNCTION crewlet_approval_a2a_push_owed();
