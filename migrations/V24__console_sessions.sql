-- The operator's console keeps what every replica must agree on in Postgres
-- (issue 22): its sessions, the login failures that throttle a client, and
-- the CSRF tokens of pages served without a session.

-- One row per login. The cookie holds a random id; only its SHA-256 is kept.
CREATE TABLE console_sessions (
    id_hash     bytea PRIMARY KEY,
    csrf        text NOT NULL,          -- the CSRF token of this session's forms
    client      text NOT NULL,          -- who logged in (the address the login came from)
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz             -- set by logging out
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

-- Wrong tokens per client in the current window (a row is removed by a
-- successful login, and once its window is long over).
CREATE TABLE console_login_failures (
    client            text PRIMARY KEY,
    failures          integer NOT NULL,
    window_started_at timestamptz NOT NULL
);

-- Tokens every replica shares: the login form's CSRF token, and the one of
-- a console that needs no login.
CREATE TABLE console_tokens (
    purpose     text PRIMARY KEY,
    value       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Replaying a dead letter to a bridge's queue checks that a stored request
-- named it as its reply_to.
CREATE INDEX handoff_requests_by_reply_to ON handoff_requests (reply_to) WHERE reply_to IS NOT NULL;
