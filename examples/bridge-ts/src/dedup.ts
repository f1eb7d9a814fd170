/**
 * Delivery is at-least-once: after a lost confirm or a reconnect the fleet
 * may publish a status, question or reply again with the same `message_id`.
 * A bridge remembers the ids it has handled and drops a repeat.
 *
 * This one keeps the newest `capacity` ids in memory (a `Map` keeps insertion
 * order, so the oldest is evicted first). A bridge that must not repeat a chat
 * message across its own restarts keeps them in its database instead, written
 * in the same transaction as whatever it does with the message.
 */
export class SeenMessageIds {
  private readonly seen = new Map<string, true>();

  constructor(private readonly capacity = 10_000) {
    if (capacity < 1) throw new RangeError('capacity must be at least 1');
  }

  /** Whether `messageId` was handled already. */
  has(messageId: string): boolean {
    return this.seen.has(messageId);
  }

  /** Remembers a handled id; true the first time, false for a repeat. */
  remember(messageId: string): boolean {
    if (this.seen.has(messageId)) return false;
    this.seen.set(messageId, true);
    if (this.seen.size > this.capacity) {
      const oldest = this.seen.keys().next();
      if (!oldest.done) this.seen.delete(oldest.value);
    }
    return true;
  }
}
