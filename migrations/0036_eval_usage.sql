-- The tokens replays and evals spend, charged to evals.budget and never to
-- a seat's or the company's counters (docs/architecture.md, "Replay"): one
-- row per model call of a replay, summed over the budget's windows on the
-- company's clock.
CREATE TABLE eval_usage (
    id            bigserial PRIMARY KEY,
    turn_id       text NOT NULL,
    principal     text NOT NULL,
    profile       text NOT NULL,
    input_tokens  bigint NOT NULL,
    output_tokens bigint NOT NULL,
    recorded_at   timestamptz NOT NULL
);

CREATE INDEX eval_usage_recorded_at ON eval_usage (recorded_at);
