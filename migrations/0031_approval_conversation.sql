-- The conversation a gated call was made in, so the console links an
-- approval to the transcript that asked for it. '' for an approval asked
-- before this column.
ALTER TABLE approvals ADD COLUMN conversation text NOT NULL DEFAULT '';
