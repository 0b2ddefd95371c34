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
