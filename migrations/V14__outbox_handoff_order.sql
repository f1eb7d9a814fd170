-- The relay takes a handoff's messages one at a time, oldest first, each
-- only when no earlier one of the same handoff is left in the outbox: the
-- look-up needs every bridge row, not only those waiting for a retry.
CREATE INDEX outbox_by_handoff ON outbox (correlation_id, id) WHERE correlation_id IS NOT NULL;
DROP INDEX outbox_waiting;
