-- The one question a money window asks (docs/architecture.md, "Cost"): when
-- a budget with on_limit: ask reaches its share of a money cap, a ticket
-- whose question waits on ask.to. One row per window (scope as in
-- usage_counters, window, start), so a step run twice, or again on another
-- node, asks once. decision is waiting until the asked seat answers, then
-- yes or no as the answer was read; no holds the window's seats until it
-- turns. Rows go with their window's counters (400 days).
CREATE TABLE budget_asks (
    scope         text NOT NULL,
    window_name   text NOT NULL,
    window_start  timestamptz NOT NULL,
    ticket_id     text NOT NULL UNIQUE,
    seat          text NOT NULL,
    asked_to      text NOT NULL,
    used_nano_usd bigint NOT NULL,
    cap_nano_usd  bigint NOT NULL,
    asked_at      timestamptz NOT NULL DEFAULT now(),
    decision      text NOT NULL DEFAULT 'waiting' CHECK (decision IN ('waiting', 'yes', 'no')),
    answer        text NOT NULL DEFAULT '',
    answered_by   text NOT NULL DEFAULT '',
    answered_at   timestamptz,
    PRIMARY KEY (scope, window_name, window_start)
);
