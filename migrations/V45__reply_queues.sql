-- Issue 23, the lean hop: the bridges' own reply queues are kept once each.
--
-- Replaying a dead letter to a bridge's queue checks that a stored request
-- named the queue as its `reply_to` (V24). That check read an index of
-- every request's `reply_to`, which took an entry at each request's insert
-- and again at its reply (an update that is not HOT): two index entries per
-- request for a check an operator makes now and then. The queues are now
-- kept in a table of their own, one row per queue, written by intake's
-- statement only the first time a queue is named.
CREATE TABLE reply_queues (
    queue       text PRIMARY KEY,
    first_seen  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO reply_queues (queue)
    SELECT DISTINCT reply_to FROM handoff_requests WHERE reply_to IS NOT NULL;
DROP INDEX handoff_requests_by_reply_to;
