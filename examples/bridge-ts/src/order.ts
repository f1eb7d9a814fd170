import type { BridgeStatus } from './contract.js';

/**
 * The fleet numbers one handoff's statuses 1, 2, 3 … in the order they
 * happened. Within one queue they arrive in that order, but a redelivery (a
 * consumer that reconnected, a message the relay re-published) can bring an
 * old one back after a newer one: a bridge shows a status only when its
 * `seq` is higher than the last one it showed, so a chat never goes from
 * `completed` back to `running`.
 */
export class StatusOrder {
  private readonly latest = new Map<string, number>();

  /** Whether `status` is newer than every status of its handoff accepted so far. */
  isNewer(status: Pick<BridgeStatus, 'handoffId' | 'seq'>): boolean {
    return status.seq > this.latestSeq(status.handoffId);
  }

  /** Accepts `status` if it is newer; true when it was. */
  accept(status: Pick<BridgeStatus, 'handoffId' | 'seq'>): boolean {
    if (!this.isNewer(status)) return false;
    this.latest.set(status.handoffId, status.seq);
    return true;
  }

  /** The highest `seq` accepted for a handoff (0 before any). */
  latestSeq(handoffId: string): number {
    return this.latest.get(handoffId) ?? 0;
  }

  /** Forgets a finished handoff. */
  forget(handoffId: string): void {
    this.latest.delete(handoffId);
  }
}
