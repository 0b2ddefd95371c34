-- Seats spawned at run time from a role's pool; a live one has no
-- reaped_at. version rises with every spawn and reap, so a process sees
-- that the spawned seats changed by reading one number a beat.
-- (docs/architecture.md, "Spawned seats")
CREATE SEQUENCE spawned_seats_version;
CREATE TABLE spawned_seats (
    handle     text PRIMARY KEY,
    role       text NOT NULL,
    spawned_by text NOT NULL,
    spawned_at timestamptz NOT NULL DEFAULT now(),
    reaped_at  timestamptz,
    version    bigint NOT NULL DEFAULT nextval('spawned_seats_version')
);
CREATE INDEX spawned_seats_live ON spawned_seats (role) WHERE reaped_at IS NULL;
