-- Issue 23, part 4: a request costs what its work costs. Intake and the
-- collector wrote a request's trail one row per event and its request row
-- several times over; they now write each in one statement.
--
-- 1. A handoff's events are written one row per statement that appends
--    them (`handoff_log`: a transaction's events together, as three
--    parallel arrays in order), as the run journal is (V28). Intake wrote
--    five event rows for a request it started, the collector three, each
--    with two index entries and a foreign-key check; now one row each. The
--    view `handoff_events` reads them back one per row, as before (an
--    event's id is its row's id and its place in the row; its time is its
--    row's), so the console, `baton runs show` and the tests read them
--    unchanged. No foreign key: every writer appends for a request it
--    inserted or locked in the same transaction, or selects the request in
--    the same statement (`outbox::note_for_request`); request rows are never
--    deleted (retention keeps them, V27), and retention deletes a request's
--    log with its trail.
CREATE TABLE handoff_log (
    handoff_id  text NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    created_at  timestamptz NOT NULL DEFAULT now(),
    types       text[] NOT NULL,
    statuses    text[] NOT NULL,
    messages    text[] NOT NULL,
    PRIMARY KEY (handoff_id, id),
    CHECK (cardinality(types) BETWEEN 1 AND 4096
           AND cardinality(statuses) = cardinality(types)
           AND cardinality(messages) = cardinality(types))
);

INSERT INTO handoff_log (handoff_id, created_at, types, statuses, messages)
SELECT handoff_id, created_at, ARRAY[type], ARRAY[status], ARRAY[message] FROM handoff_events ORDER BY id;
DROP TABLE handoff_events;

CREATE VIEW handoff_events AS
SELECT l.id * 4096 + e.n AS id, l.handoff_id, e.type, e.status, e.message, '{}'::jsonb AS metadata, l.created_at
  FROM handoff_log l,
       unnest(l.types, l.statuses, l.messages) WITH ORDINALITY AS e(type, status, message, n);

-- 2. A request row is updated in place: its status (and its sequence
--    number for the bridge) changes a few times in its life, its run and
--    reply once. Room on each page keeps an updated version beside the old
--    one (a HOT update when no indexed column changes, and a WAL record
--    that leaves out the unchanged body either way).
ALTER TABLE handoff_requests SET (fillfactor = 50);

-- 3. A run's request is not checked by a foreign key: a run is created only
--    by intake (for the request it inserted or locked in the same
--    transaction), a chat's next turn (the request locked) and a retry
--    (likewise), and request rows are never deleted. Each check took a share
--    lock on the request's row (a WAL record per request).
ALTER TABLE runs DROP CONSTRAINT runs_handoff_id_fkey;

-- 4. A free chat's conversation row is created with its live run in one
--    write (it was inserted, then updated): the run is inserted later in the
--    same transaction, so the key's check waits for the commit. Its
--    ON DELETE SET NULL still acts at once (actions are never deferred).
ALTER TABLE conversations ALTER CONSTRAINT conversations_live_run_fkey DEFERRABLE INITIALLY DEFERRED;
