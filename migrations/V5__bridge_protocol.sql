-- The rest of the bridge protocol: status callbacks over HTTP and the
-- fleet-wide settings loaded from the profiles file (disclosure policy).

ALTER TABLE handoff_requests ADD COLUMN status_url text;

-- Status updates to POST to a bridge's callback.statusUrl. One handoff's
-- updates are delivered in order; a failing callback never blocks a run.
CREATE TABLE callbacks (
    id              bigserial PRIMARY KEY,
    handoff_id      text NOT NULL REFERENCES handoff_requests(id),
    url             text NOT NULL,
    body            jsonb NOT NULL,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX callbacks_due ON callbacks (next_attempt_at);
CREATE INDEX callbacks_by_handoff ON callbacks (handoff_id, id);

CREATE TABLE fleet_settings (
    key        text PRIMARY KEY,
    value      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
