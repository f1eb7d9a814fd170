-- One trace per run across every hop: the W3C trace context a bridge sent
-- (or the one intake started) is kept with its request, and each outbox row
-- carries the context of the span that wrote it; the relay publishes it in
-- the message's `traceparent`/`tracestate` headers.
ALTER TABLE handoff_requests
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate  text;
ALTER TABLE outbox
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate  text;
