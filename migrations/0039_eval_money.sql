-- What each replay's and judge's model call cost, at the prices when it
-- ran (docs/architecture.md, "Cost"): nano-dollars, and the tokens no price
-- was found for. An eval run's cost is the sum of its charges.
ALTER TABLE eval_usage
    ADD COLUMN nano_usd bigint NOT NULL DEFAULT 0,
    ADD COLUMN unpriced_tokens bigint NOT NULL DEFAULT 0;

CREATE INDEX eval_usage_run ON eval_usage (run) WHERE run <> '';
