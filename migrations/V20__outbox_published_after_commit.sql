-- A role publishes the outbox rows it writes itself, right after the commit,
-- and writes them due only after a grace period (next_attempt_at in the
-- future): the relay sweeps them only if they are still there by then. Such
-- rows wake no relay, so the statement-level NOTIFY, which made every commit
-- that wrote a row queue behind Postgres's global notification lock, goes.
-- A row due at once (written by an operator command, the relay's own sweeps,
-- a role without a publisher, or inserted by hand) still wakes the relay.
DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH ROW WHEN (NEW.next_attempt_at <= NEW.created_at)
    EXECUTE FUNCTION notify_outbox();
