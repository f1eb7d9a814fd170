// The wire types, generated from Baton's Rust types into contract/ts (never
// edited by hand). Everything in this package imports them from here, so a
// change to the contract is a compile error in the bridge, not a surprise
// at run time.
export type {
  BridgeAnswer,
  BridgeCancel,
  BridgeQuestion,
  BridgeReply,
  BridgeStatus,
  ErrorCode,
  HandoffRequest,
  HandoffStatus,
  StatusCallback,
} from '../../../contract/ts/index.js';

import type { BridgeQuestion, BridgeReply, BridgeStatus } from '../../../contract/ts/index.js';

/** What the fleet sends to a bridge's `reply_to` queue, told apart by `type`. */
export type FleetMessage = BridgeStatus | BridgeReply | BridgeQuestion;
