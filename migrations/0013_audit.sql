-- The API's audit log
-- (docs/architecture.md, "Doors: the API and the Temporal frontend"): one row
-- per action, allowed, denied or failed. Append-only: nothing updates a row;
-- maintenance deletes rows older than maintenance.audit_retention. Never
-- message text or secrets.
CREATE TABLE audit_log (
    id         bigserial PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT now(),
    principal  text NOT NULL,
    role       text NOT NULL,
    -- the route, "POST /seats/{handle}/pause"
    action     text NOT NULL,
    -- the route's ids, "handle=cto"
    target     text NOT NULL DEFAULT '',
    -- allowed, denied or failed
    outcome    text NOT NULL,
    status     integer NOT NULL,
    reason     text NOT NULL DEFAULT '',
    request_id text NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_principal ON audit_log (principal, id DESC);
