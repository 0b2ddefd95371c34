-- Retention of tickets, approvals and a person's archived mail
-- (store.TrimRetention; docs/operations.md, "Retention"). Each is deleted
-- only once it is over: a ticket once settled, an approval once decided
-- (and no grant it left still holds), a person's mail once they have read
-- it. The partial indexes cover just the rows that may go.
CREATE INDEX tickets_settled ON tickets (settled_at) WHERE phase NOT IN ('pending', 'asking');
CREATE INDEX approvals_decided ON approvals (decided_at) WHERE status <> 'pending';
-- the grant check of each approval deleted, and the cascade to its grants
CREATE INDEX approval_grants_approval ON approval_grants (approval);
-- a person's mail is aged by its stream id's time, when it was sent
CREATE INDEX person_mail_sent ON person_mail (ms);

-- How far each person has read their mail: the newest entry they were
-- shown when they read their own inbox (GET /seats/{handle}/inbox by a
-- principal bound to the seat), like a chat's read mark. It only rises.
-- Retention deletes a person's archived mail at or before it, never after.
CREATE TABLE person_mail_read (
    seat    text PRIMARY KEY,
    ms      bigint NOT NULL,
    seq     bigint NOT NULL,
    read_at timestamptz NOT NULL DEFAULT now()
);
