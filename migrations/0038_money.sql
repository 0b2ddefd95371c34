-- Money on every usage receipt (docs/architecture.md, "Cost"): a model
-- call's tokens by kind (input counts cached ones too), the model it was
-- priced as, the price version and the amount in nano-dollars (1e-9 USD),
-- frozen when the row is written; a later price table never reprices it.
-- priced is false when no price was found: the amount is 0 and its tokens
-- count as unpriced, never as free. Rounds written before this are unpriced.
ALTER TABLE turn_rounds
    ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN model text NOT NULL DEFAULT '',
    ADD COLUMN price_version text NOT NULL DEFAULT '',
    ADD COLUMN nano_usd bigint NOT NULL DEFAULT 0,
    ADD COLUMN priced boolean NOT NULL DEFAULT false;

-- Money beside tokens in each budget window's counter, charged in the same
-- statement as the tokens: unpriced_tokens are the tokens of the window no
-- price was found for.
ALTER TABLE usage_counters
    ADD COLUMN nano_usd bigint NOT NULL DEFAULT 0,
    ADD COLUMN unpriced_tokens bigint NOT NULL DEFAULT 0;

-- Spend per day on the company's clock, seat (with its role then), model
-- and profile, charged once with its round: what GET /costs reads. It is
-- kept apart from turn_rounds, which retention trims with their turns, so a
-- month's costs outlive the turns that spent them.
CREATE TABLE spend_daily (
    day             date NOT NULL,
    seat            text NOT NULL,
    role            text NOT NULL,
    model           text NOT NULL,
    profile         text NOT NULL,
    rounds          bigint NOT NULL DEFAULT 0,
    input_tokens    bigint NOT NULL DEFAULT 0,
    output_tokens   bigint NOT NULL DEFAULT 0,
    cached_tokens   bigint NOT NULL DEFAULT 0,
    unpriced_tokens bigint NOT NULL DEFAULT 0,
    nano_usd        bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, seat, role, model, profile)
);
