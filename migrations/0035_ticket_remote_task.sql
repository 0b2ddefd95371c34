-- A ticket to a remote A2A agent (a2a:NAME) records the remote's task and
-- context once its task was sent, so the workflow serving it, and an
-- operator reading GET /tickets/{id}, know which remote task it is; a
-- send retried after the remote answered finds it here and sends nothing
-- more. Empty for a ticket to a seat.
ALTER TABLE tickets ADD COLUMN remote_task text NOT NULL DEFAULT '',
                    ADD COLUMN remote_context text NOT NULL DEFAULT '';
