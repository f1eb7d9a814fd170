import type { BridgeReply } from './contract.js';

/** A reply that reports a failure: it always carries the error's code and message. */
export type FailedReply = BridgeReply & { status: 'failed'; error: NonNullable<BridgeReply['error']> };

/** Narrows a reply to a failure, so `reply.error.code` type-checks without a `?`. */
export function isFailed(reply: BridgeReply): reply is FailedReply {
  return reply.status === 'failed' && reply.error !== undefined && reply.error !== null;
}
