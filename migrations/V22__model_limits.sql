-- Issue 15: fleet-wide limits on model calls ([[limits]] in the profiles file).
--
-- The limit a profile's model calls are under, resolved when the profiles
-- file is applied and read with the profile (no round trip of its own).
ALTER TABLE profiles ADD COLUMN model_limit jsonb;

-- One row per limit in use: its lock serializes admissions fleet-wide, and
-- a provider's 429 with Retry-After pauses every worker until paused_until.
CREATE TABLE model_limits (
    name          text PRIMARY KEY,
    paused_until  timestamptz
);

-- Calls admitted under a limit, kept for its window (and ten minutes, for
-- the token estimate): in flight while held_until is set (until then at the
-- latest: a worker that died stops counting), then finished with the usage
-- the provider reported (reported) or the estimate kept.
CREATE TABLE model_limit_calls (
    id          uuid PRIMARY KEY,
    limit_name  text NOT NULL,
    started_at  timestamptz NOT NULL,
    held_until  timestamptz,
    tokens      bigint NOT NULL,
    reported    boolean NOT NULL DEFAULT false
);
CREATE INDEX model_limit_calls_window ON model_limit_calls (limit_name, started_at);
CREATE INDEX model_limit_calls_in_flight ON model_limit_calls (limit_name, held_until) WHERE held_until IS NOT NULL;

-- Admits one call under a limit, or says how long to wait and why. One
-- statement: the limit's row lock is held only while it runs, never while a
-- call waits. wait_secs NULL with a reason: wait for a call to end (poll).
CREATE FUNCTION baton_limit_admit(p_name text, p_call uuid, p_requests integer, p_tokens bigint, p_concurrent integer,
                                  p_window_secs float8, p_estimate bigint, p_hold_secs float8)
RETURNS TABLE (wait_secs float8, reason text)
LANGUAGE plpgsql AS $$
DECLARE
    t        timestamptz;
    w        interval := make_interval(secs => p_window_secs);
    keep     interval := greatest(make_interval(secs => p_window_secs), interval '10 minutes');
    paused   timestamptz;
    n        bigint;
    free_at  timestamptz;
    est      bigint;
BEGIN
    INSERT INTO model_limits (name) VALUES (p_name) ON CONFLICT (name) DO NOTHING;
    SELECT paused_until INTO paused FROM model_limits WHERE name = p_name FOR UPDATE;
    t := clock_timestamp();
    IF paused > t THEN
        RETURN QUERY SELECT extract(epoch FROM paused - t)::float8, 'retry_after'::text;
        RETURN;
    END IF;
    IF p_concurrent IS NOT NULL THEN
        SELECT count(*) INTO n FROM model_limit_calls WHERE limit_name = p_name AND held_until > t;
        IF n >= p_concurrent THEN
            RETURN QUERY SELECT NULL::float8, 'concurrent_calls'::text;
            RETURN;
        END IF;
    END IF;
    IF p_requests IS NOT NULL THEN
        -- While the p_requests-th newest call of the window is in it, the window is full.
        SELECT c.started_at INTO free_at FROM model_limit_calls c
         WHERE c.limit_name = p_name AND c.started_at > t - w
         ORDER BY c.started_at DESC OFFSET p_requests - 1 LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT extract(epoch FROM free_at + w - t)::float8, 'requests_per_minute'::text;
            RETURN;
        END IF;
    END IF;
    SELECT coalesce(max(c.tokens) FILTER (WHERE c.reported), p_estimate) INTO est
      FROM model_limit_calls c WHERE c.limit_name = p_name AND c.started_at > t - keep;
    IF p_tokens IS NOT NULL THEN
        -- A call bigger than the whole quota still runs, alone in its window.
        est := least(est, p_tokens);
        -- Newest first: the first call whose running sum leaves no room must leave the window.
        SELECT x.started_at INTO free_at FROM (
            SELECT c.started_at, sum(c.tokens) OVER (ORDER BY c.started_at DESC, c.id) AS total
              FROM model_limit_calls c WHERE c.limit_name = p_name AND c.started_at > t - w) x
         WHERE x.total + est > p_tokens
         ORDER BY x.started_at DESC LIMIT 1;
        IF FOUND THEN
            RETURN QUERY SELECT extract(epoch FROM free_at + w - t)::float8, 'tokens_per_minute'::text;
            RETURN;
        END IF;
    END IF;
    INSERT INTO model_limit_calls (id, limit_name, started_at, held_until, tokens)
    VALUES (p_call, p_name, t, t + make_interval(secs => p_hold_secs), est);
    DELETE FROM model_limit_calls
     WHERE limit_name = p_name AND started_at < t - keep AND (held_until IS NULL OR held_until < t);
    RETURN QUERY SELECT 0::float8, NULL::text;
END
$$;

-- Ends an admitted call: it no longer counts as in flight, and its tokens
-- become what the provider reported (or stay the estimate).
CREATE FUNCTION baton_limit_done(p_call uuid, p_tokens bigint) RETURNS void
LANGUAGE sql AS $$
    UPDATE model_limit_calls
       SET held_until = NULL, tokens = coalesce(p_tokens, tokens), reported = reported OR p_tokens IS NOT NULL
     WHERE id = p_call;
$$;

-- A provider's 429 with Retry-After: every worker's next call under the limit waits until then.
CREATE FUNCTION baton_limit_pause(p_name text, p_secs float8) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO model_limits (name, paused_until) VALUES (p_name, clock_timestamp() + make_interval(secs => p_secs))
    ON CONFLICT (name) DO UPDATE
       SET paused_until = greatest(coalesce(model_limits.paused_until, EXCLUDED.paused_until), EXCLUDED.paused_until);
$$;
