-- Issue 23, the lean hop: the run journal is written one row per statement
-- that appends to it (a step's events together), not one row per event. A
-- steady-state hop wrote 14 event rows with two index entries and a foreign
-- key check each (about 5.8 KB of its 14 KB of WAL); it now writes one or two.
--
-- `journal` is append-only and has no foreign key: the only writer is the
-- fenced step code (and the run's own start and end), which appends events
-- only for a run and invocation it holds, so the key would check nothing the
-- code does not already guarantee; retention deletes a run's rows with it.
-- Each row keeps its events in order as three parallel arrays, and the time
-- the statement wrote them (clock_timestamp(): exact hop latencies, V6).
CREATE TABLE journal (
    run_id      uuid NOT NULL,
    id          bigint GENERATED ALWAYS AS IDENTITY,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    invocations uuid[] NOT NULL,
    types       text[] NOT NULL,
    payloads    jsonb[] NOT NULL,
    PRIMARY KEY (run_id, id),
    CHECK (cardinality(types) BETWEEN 1 AND 4096
           AND cardinality(invocations) = cardinality(types)
           AND cardinality(payloads) = cardinality(types))
);

INSERT INTO journal (run_id, created_at, invocations, types, payloads)
SELECT run_id, created_at, ARRAY[invocation_id], ARRAY[type], ARRAY[payload] FROM events ORDER BY id;
DROP TABLE events;

-- What every reader reads: one row per event, as before. An event's id is
-- its row's id and its place in the row (ordered as written, unique); its
-- time is its row's.
CREATE VIEW events AS
SELECT j.id * 4096 + e.n AS id, j.run_id, e.invocation_id, e.type, 'info'::text AS level, e.payload, j.created_at
  FROM journal j,
       unnest(j.invocations, j.types, j.payloads) WITH ORDINALITY AS e(invocation_id, type, payload, n);

-- The transcript likewise: the steps one transaction writes (a claim's
-- prompt, its model turn and the tool results it ran) are one row, in order
-- from `seq`. Its primary key is the invocation and the first step's seq;
-- no foreign key, for the same reason as the journal's (only the fenced step
-- code writes here, for the invocation whose claim it holds).
CREATE TABLE transcript (
    invocation_id uuid NOT NULL,
    seq           integer NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    kinds         text[] NOT NULL,
    payloads      jsonb[] NOT NULL,
    PRIMARY KEY (invocation_id, seq),
    CHECK (cardinality(kinds) >= 1 AND cardinality(payloads) = cardinality(kinds))
);

INSERT INTO transcript (invocation_id, seq, created_at, kinds, payloads)
SELECT invocation_id, seq, created_at, ARRAY[kind], ARRAY[payload] FROM steps;
DROP TABLE steps;

-- One row per step, as before; `tx` names the transaction that wrote it.
CREATE VIEW steps AS
SELECT t.invocation_id, t.seq + s.n::integer - 1 AS seq, s.kind, s.payload, t.created_at, t.xmin AS tx
  FROM transcript t,
       unnest(t.kinds, t.payloads) WITH ORDINALITY AS s(kind, payload, n);

-- An invocation's row is updated a few times per hop (its claim, its spend,
-- its end) and a task's twice: room on each page lets the new version stay
-- on the page of the old (a HOT update when no indexed column changed, and
-- a WAL record that leaves out the bytes both versions share, the brief
-- among them).
ALTER TABLE invocations SET (fillfactor = 50);
ALTER TABLE tasks SET (fillfactor = 50);

-- Model limits admit calls through baton_limit_admit_call (V27) since its
-- worker estimates and holds; the V22 function it replaced has no caller.
DROP FUNCTION baton_limit_admit(text, uuid, integer, bigint, integer, float8, bigint, float8);
