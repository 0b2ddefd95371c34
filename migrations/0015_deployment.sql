-- The deployment this database belongs to: one company, on one Temporal
-- namespace and task queue
-- (docs/operations.md, "One company per database and per namespace"). Node
-- presence, placement and the mailbox registry are per database, so a second
-- company on the same database would place seats on the first one's nodes and
-- count its mailboxes; every server process claims this row before it serves
-- and is refused when another deployment holds it
-- (internal/store/deployment.go).
--
-- At most one row: the key can only be true. A database that predates this
-- migration (the dev stack's shared one) gets no row here; the first server
-- process to start after the upgrade claims it.
CREATE TABLE deployment (
    id         boolean PRIMARY KEY DEFAULT true CHECK (id),
    company    text NOT NULL,
    namespace  text NOT NULL,
    task_queue text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
