-- Baton's schema. Postgres is the source of truth; messages are hints.

CREATE TABLE profiles (
    id          text PRIMARY KEY,
    spec        jsonb NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- HandoffRequest.targetAgent -> root profile id.
CREATE TABLE routes (
    target_agent text PRIMARY KEY,
    profile_id   text NOT NULL
);

-- One row per bridge request id: at most one run per request.
CREATE TABLE handoff_requests (
    id              text PRIMARY KEY,
    body            jsonb NOT NULL,
    source          text NOT NULL,
    target_agent    text NOT NULL,
    status          text NOT NULL,
    language        text NOT NULL,
    reply_to        text,            -- the bridge's own reply queue, if it set one
    reply_chat_id   text,
    run_id          uuid,
    status_seq      integer NOT NULL DEFAULT 0,
    deliveries      integer NOT NULL DEFAULT 1,
    reply_sent_at   timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE handoff_events (
    id          bigserial PRIMARY KEY,
    handoff_id  text NOT NULL REFERENCES handoff_requests(id),
    type        text NOT NULL,
    status      text,
    message     text,
    metadata    jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX handoff_events_by_handoff ON handoff_events (handoff_id, id);

CREATE TABLE runs (
    id              uuid PRIMARY KEY,
    handoff_id      text UNIQUE REFERENCES handoff_requests(id),
    status          text NOT NULL,
    root_profile_id text NOT NULL,
    handoff_count   integer NOT NULL DEFAULT 0,
    final_text      text,
    error           jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

CREATE TABLE invocations (
    id                   uuid PRIMARY KEY,
    run_id               uuid NOT NULL REFERENCES runs(id),
    parent_invocation_id uuid REFERENCES invocations(id),
    incoming_task_id     uuid,
    profile_id           text NOT NULL,
    kind                 text NOT NULL,
    status               text NOT NULL,
    exit_policy          text NOT NULL,
    brief                text NOT NULL,
    -- The provider session id: the provider may correlate turns with it; the model never sees it.
    session_id           text GENERATED ALWAYS AS (run_id::text || ':' || id::text) STORED,
    claim_epoch          bigint NOT NULL DEFAULT 0,
    lease_owner          text,
    lease_expires_at     timestamptz,
    republished_at       timestamptz,
    error                jsonb,
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    finished_at          timestamptz
);
-- The database itself keeps one foreground owner per run.
CREATE UNIQUE INDEX one_foreground_owner_per_run ON invocations (run_id)
    WHERE kind IN ('root', 'handoff') AND status IN ('created', 'running', 'parked');
-- The relay's sweep for lost or stalled work looks at live rows only.
CREATE INDEX invocations_live ON invocations (lease_expires_at)
    WHERE status IN ('created', 'running');
CREATE INDEX invocations_by_run ON invocations (run_id, created_at);

CREATE TABLE tasks (
    id                     uuid PRIMARY KEY,
    run_id                 uuid NOT NULL REFERENCES runs(id),
    parent_invocation_id   uuid NOT NULL REFERENCES invocations(id),
    child_invocation_id    uuid NOT NULL REFERENCES invocations(id),
    target_profile_id      text NOT NULL,
    workspace_key          text NOT NULL,
    continuation           text NOT NULL,
    status                 text NOT NULL,
    task                   jsonb NOT NULL,
    budget                 jsonb,
    created_by_tool_call_id text NOT NULL,
    result_ref             text,
    error                  jsonb,
    created_at             timestamptz NOT NULL DEFAULT now(),
    finished_at            timestamptz
);
CREATE INDEX tasks_pending_by_parent ON tasks (parent_invocation_id)
    WHERE status IN ('queued', 'running');
ALTER TABLE invocations ADD CONSTRAINT invocations_incoming_task
    FOREIGN KEY (incoming_task_id) REFERENCES tasks(id) DEFERRABLE INITIALLY DEFERRED;

-- The transcript of an invocation, step by step: what makes it resumable.
CREATE TABLE steps (
    invocation_id uuid NOT NULL REFERENCES invocations(id),
    seq           integer NOT NULL,
    kind          text NOT NULL,          -- prompt | model_turn | tool_result
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (invocation_id, seq)
);

-- The run journal.
CREATE TABLE events (
    id            bigserial PRIMARY KEY,
    run_id        uuid NOT NULL REFERENCES runs(id),
    invocation_id uuid,
    type          text NOT NULL,
    level         text NOT NULL DEFAULT 'info',
    payload       jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_by_run ON events (run_id, id);

-- The run workspace: files by logical path.
CREATE TABLE workspace_files (
    run_id     uuid NOT NULL REFERENCES runs(id),
    path       text NOT NULL,
    content    text NOT NULL,
    sha256     text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, path)
);

-- What each invocation has read, for write-after-read checks.
CREATE TABLE workspace_reads (
    invocation_id uuid NOT NULL REFERENCES invocations(id),
    path          text NOT NULL,
    sha256        text NOT NULL,
    whole         boolean NOT NULL,
    PRIMARY KEY (invocation_id, path)
);

-- The run-level commit ledger; the latest entry's reply is the final text.
CREATE TABLE commits (
    run_id        uuid NOT NULL REFERENCES runs(id),
    ordinal       integer NOT NULL,
    invocation_id uuid NOT NULL REFERENCES invocations(id),
    tool_call_id  text NOT NULL,
    path          text NOT NULL,
    mode          text NOT NULL,
    reason        text,
    reply         text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, ordinal),
    UNIQUE (invocation_id, tool_call_id)
);

-- The transactional outbox: every message is derived from a committed row.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    queue        text NOT NULL,        -- logical queue name, without prefix, or a bridge's own reply_to
    message_id   text,
    correlation_id text,
    body         jsonb NOT NULL,
    external     boolean NOT NULL DEFAULT false, -- a bridge's own reply_to queue, used as is
    mandatory    boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION notify_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('baton_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION notify_outbox();
