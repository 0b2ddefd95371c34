-- One row per fire of an org schedule (docs/architecture.md, "Schedules"):
-- the seat a fire's message went to, so a fire run twice (a retry, a
-- second start for the same fire time) goes to the same seat under the same
-- event id even when its target is a role; when the seat answered it; and
-- how many fires Temporal had skipped for overlap when it began, which is
-- the schedule's fire history. Rows age out with the completion ledger.
CREATE TABLE schedule_fires (
    schedule        text        NOT NULL,
    fire_time       timestamptz NOT NULL,
    seat            text        NOT NULL,
    event_id        text        NOT NULL,
    fired_at        timestamptz NOT NULL DEFAULT now(),
    handled_at      timestamptz,
    skipped_before  bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (schedule, fire_time)
);

CREATE INDEX schedule_fires_fired_at ON schedule_fires (fired_at);
