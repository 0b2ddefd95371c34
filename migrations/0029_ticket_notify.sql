-- A ticket whose phase changes wakes whoever waits on it (POST /tickets with
-- wait): pg_notify runs in the changing transaction, so the notification goes
-- out when it commits and never for a change that rolled back. The payload is
-- the ticket id; the waiter reads the ticket itself.
CREATE OR REPLACE FUNCTION crewlet_ticket_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('crewlet_ticket', NEW.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER tickets_phase_notify AFTER UPDATE OF phase ON tickets
    FOR EACH ROW WHEN (OLD.phase IS DISTINCT FROM NEW.phase)
    EXECUTE FUNCTION crewlet_ticket_changed();
