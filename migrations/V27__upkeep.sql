-- Issue 22, part 4: nothing grows for ever, and a model-limit slot of a
-- worker that died comes free soon.
--
-- It comes after every earlier migration (refinery refuses a new version
-- below one a database already has), so every table it names exists.

-- Retention (`baton runs prune`). A request's trail (its handoff events,
-- bridge messages, callbacks, answers, cancels and questions) goes with its
-- run, or by age when it had none; the request row itself stays, so a
-- repeated id is still a duplicate, and says when its trail went.
ALTER TABLE handoff_requests ADD COLUMN pruned_at timestamptz;
CREATE INDEX handoff_requests_to_prune ON handoff_requests (reply_sent_at)
    WHERE pruned_at IS NULL AND reply_sent_at IS NOT NULL;
CREATE INDEX coding_sessions_by_age ON coding_sessions (updated_at);

-- Admits one call under a limit, as baton_limit_admit (V22) does, with two
-- differences: a call in flight counts the tokens the worker estimated from
-- the request itself (p_estimate), not the largest usage of the last ten
-- minutes, so one huge prompt no longer throttles the limit for ten
-- minutes; and a call is held only for p_hold_secs, which its worker renews
-- while the call runs (a worker that died frees its slot within the hold).
-- Calls are kept for the window (at least a minute, for the console's figures).
CREATE FUNCTION baton_limit_admit_call(p_name text, p_call uuid, p_requests integer, p_tokens bigint,
                                       p_concurrent integer, p_window_secs float8, p_estimate bigint,
                                       p_hold_secs float8)
RETURNS TABLE (wait_secs float8, reason text)
LANGUAGE plpgsql AS $$
DECLARE
    t        timestamptz;
    w        interval := make_interval(secs => p_window_secs);
    keep     interval := greatest(make_interval(secs => p_window_secs), interval '1 minute');
    paused   timestamptz;
    n        bigint;
    free_at  timestamptz;
    est      bigint := p_estimate;
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
