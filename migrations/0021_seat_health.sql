-- What the health duty last concluded about each agent seat, and since when.
-- observed_status is the workflow status the duty last saw (or 'absent'),
-- with when it first saw it, so "establishing too long" and "gone" are
-- measured across passes without asking the seat.
CREATE TABLE seat_health (
    seat            text PRIMARY KEY,
    state           text NOT NULL,
    cause           text NOT NULL DEFAULT '',
    since           timestamptz NOT NULL DEFAULT now(),
    observed_status text NOT NULL DEFAULT '',
    observed_since  timestamptz NOT NULL DEFAULT now(),
    checked_at      timestamptz NOT NULL DEFAULT now()
);

-- Every change of a seat's health, for the record; maintenance keeps it
-- with the seat events (maintenance.event_retention).
CREATE TABLE seat_health_transitions (
    id         bigserial PRIMARY KEY,
    seat       text NOT NULL,
    from_state text NOT NULL,
    to_state   text NOT NULL,
    cause      text NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX seat_health_transitions_seat ON seat_health_transitions (seat, id DESC);
CREATE INDEX seat_health_transitions_at ON seat_health_transitions (at);
