-- Issue 23, the lean hop: a status message keeps its status and sequence
-- number, not its body and message id.
--
-- Three of a request's four bridge messages are statuses, and everything
-- in one (`{"type": "status", "handoffId", "status", "seq",
-- "replyToChatId", "at"}`) and its message id (`status:<handoffId>:<seq>`)
-- follows from the request's row (its id as its bridge knows it, its chat)
-- and three values: the status, its number and when it was written. Those
-- are what the row keeps now; the body and message id are rendered from
-- them, with the domain's one function, wherever a message is read
-- (`bridge::status_message`): by its writer publishing it, by the relay,
-- on the console. About 240 bytes of each status row were the two columns.
--
-- Rows written before keep their body and message id and are read as
-- they are. Replies, questions and every other message keep theirs.
ALTER TABLE bridge_messages
    ADD COLUMN status text,
    ADD COLUMN seq integer,
    ALTER COLUMN body DROP NOT NULL,
    ADD CONSTRAINT bridge_messages_body_or_status
        CHECK (body IS NOT NULL OR (status IS NOT NULL AND seq IS NOT NULL)) NOT VALID;
