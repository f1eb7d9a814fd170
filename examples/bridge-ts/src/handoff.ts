import type { BridgeQuestion, BridgeReply, BridgeStatus, FleetMessage, HandoffStatus } from './contract.js';

type Waiter = { accepts: (m: FleetMessage) => boolean; resolve: (m: FleetMessage) => void };

/**
 * What a bridge has heard about one request it sent, in the order it
 * accepted it (repeats dropped, stale statuses skipped). A real bridge
 * forwards each message to its chat as it arrives (the `onMessage` option of
 * `Bridge.connect`); this record also lets a caller wait for the next step.
 */
export class Handoff {
  readonly statuses: BridgeStatus[] = [];
  readonly questions: BridgeQuestion[] = [];
  readonly replies: BridgeReply[] = [];
  private readonly heard: FleetMessage[] = [];
  private waiters: Waiter[] = [];

  constructor(readonly id: string) {}

  /** The latest status the fleet reported, if any. */
  get status(): HandoffStatus | undefined {
    return this.statuses.at(-1)?.status;
  }

  /** Called by the bridge for each message it accepted for this handoff. */
  record(message: FleetMessage): void {
    this.heard.push(message);
    if (message.type === 'status') this.statuses.push(message);
    else if (message.type === 'question') this.questions.push(message);
    else this.replies.push(message);
    const [ready, waiting] = partition(this.waiters, (w) => w.accepts(message));
    this.waiters = waiting;
    for (const w of ready) w.resolve(message);
  }

  /** The first message (already heard, or still to come) that `matches`. */
  waitFor<T extends FleetMessage>(matches: (m: FleetMessage) => m is T, timeoutMs: number): Promise<T> {
    const found = this.heard.find(matches);
    if (found !== undefined) return Promise.resolve(found);
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter = {
        accepts: matches,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m as T);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        const seen = this.heard.map(describe).join(', ') || 'nothing';
        reject(new Error(`handoff ${this.id}: nothing matching within ${timeoutMs} ms (heard: ${seen})`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }

  /** The reply (the first one: a retried run's later reply is in `replies`). */
  reply(timeoutMs: number): Promise<BridgeReply> {
    return this.waitFor((m): m is BridgeReply => m.type === 'reply', timeoutMs);
  }

  /** The first question the agent asked. */
  question(timeoutMs: number): Promise<BridgeQuestion> {
    return this.waitFor((m): m is BridgeQuestion => m.type === 'question', timeoutMs);
  }

  /** The first status `status` reported. */
  reached(status: HandoffStatus, timeoutMs: number): Promise<BridgeStatus> {
    return this.waitFor((m): m is BridgeStatus => m.type === 'status' && m.status === status, timeoutMs);
  }
}

function partition<T>(items: T[], test: (item: T) => boolean): [T[], T[]] {
  const yes: T[] = [];
  const no: T[] = [];
  for (const item of items) (test(item) ? yes : no).push(item);
  return [yes, no];
}

function describe(m: FleetMessage): string {
  return m.type === 'status' ? `status ${m.seq} ${m.status}` : `${m.type}${m.type === 'reply' ? ` ${m.status}` : ''}`;
}
