-- Journal events carry the moment they were written, not the start of
-- their transaction, so hop latencies read off the journal are exact.
ALTER TABLE events ALTER COLUMN created_at SET DEFAULT clock_timestamp();
