-- Each node records which seats its org file names (config SeatsDigest), so
-- a worker can tell that live nodes disagree about which seats exist, as they
-- do while a changed org file rolls out, and then stop no seat and stamp no
-- mailbox absent. A node started before this migration records '': it
-- disagrees with everyone until it is restarted.
ALTER TABLE nodes ADD COLUMN seats_digest text NOT NULL DEFAULT '';
