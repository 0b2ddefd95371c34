-- Who acts on a ticket (docs/operations.md, "Authentication and authority"):
-- only its delegator, or an admin, may answer or cancel it, and the asking
-- turn is told who really answered.
ALTER TABLE tickets
    -- the API principal that opened it ('' for a seat's own delegate): a
    -- principal bound to no seat opens as "operator", so the name is what
    -- tells one such delegator from another
    ADD COLUMN opened_by   text NOT NULL DEFAULT '',
    -- who answered its latest question: a seat handle or a principal's name
    ADD COLUMN answered_by text NOT NULL DEFAULT '';
-- Answers given before this column were the delegator's, as the model was told.
UPDATE tickets SET answered_by = from_handle WHERE answer <> '';
