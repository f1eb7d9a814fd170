import { randomUUID } from 'node:crypto';
import amqp from 'amqplib';
import type { Channel, ChannelModel, ConfirmChannel, ConsumeMessage, Message, Options } from 'amqplib';

import type { BridgeAnswer, BridgeCancel, BridgeQuestion, FleetMessage, HandoffRequest } from './contract.js';
import { SeenMessageIds } from './dedup.js';
import { Handoff } from './handoff.js';
import { MalformedMessage, parseIncoming } from './incoming.js';
import { StatusOrder } from './order.js';

/** The queue the fleet reads requests, answers and cancels from (under its prefix). */
export const REQUEST_QUEUE = 'baton.bridge.requests';

export interface BridgeOptions {
  /** RabbitMQ, e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`. */
  url: string;
  /** The fleet's `BATON_QUEUE_PREFIX` (empty in production). */
  prefix?: string;
  /** This bridge's own durable queue for statuses, questions and replies. Must not start with `baton.`. */
  replyQueue: string;
  /** How long `connect` waits for the fleet to have declared its request queue. */
  waitForFleetMs?: number;
  /** Each message accepted for a handoff, before it is acked: forward it to the chat here. */
  onMessage?: (handoff: Handoff, message: FleetMessage) => void | Promise<void>;
  /** Where the bridge says what it dropped and why. */
  log?: (line: string) => void;
}

/** What the bridge dropped, by reason (each also logged). */
export interface DropCounts {
  duplicate: number;
  stale: number;
  uncorrelated: number;
  malformed: number;
}

/** The RabbitMQ user of an AMQP URL (amqplib's default, `guest`, when it names none). */
export function connectionUser(url: string): string {
  const user = new URL(url).username;
  return user === '' ? 'guest' : decodeURIComponent(user);
}

/** A message the broker returned (no queue) or refused (nack). */
export class NotDelivered extends Error {
  override readonly name = 'NotDelivered';
}

/**
 * A bridge on one AMQP connection: a confirm channel to publish on, and a
 * consumer on its own durable `reply_to` queue. Every publish waits for the
 * broker's confirm and is `mandatory`, so a message that reaches no queue is
 * an error here rather than lost.
 */
export class Bridge {
  readonly dropped: DropCounts = { duplicate: 0, stale: 0, uncorrelated: 0, malformed: 0 };
  private readonly handoffs = new Map<string, Handoff>();
  private readonly seen = new SeenMessageIds();
  private readonly order = new StatusOrder();
  private readonly returned = new Map<string, string>();
  private handling: Promise<void> = Promise.resolve();
  private closing = false;

  private constructor(
    private readonly connection: ChannelModel,
    private readonly publisher: ConfirmChannel,
    private readonly consumer: Channel,
    private readonly options: BridgeOptions,
  ) {}

  static async connect(options: BridgeOptions): Promise<Bridge> {
    if (options.replyQueue.startsWith('baton.') || options.replyQueue.startsWith(`${options.prefix ?? ''}baton.`)) {
      throw new RangeError('the reply queue must not be named like one of the fleet\'s queues (baton.*): the fleet refuses it');
    }
    const connection = await amqp.connect(options.url, { clientProperties: { connection_name: 'baton-bridge-ts' } });
    connection.on('error', (e: Error) => (options.log ?? console.warn)(`bridge connection: ${e.message}`));
    try {
      await waitForQueue(connection, `${options.prefix ?? ''}${REQUEST_QUEUE}`, options.waitForFleetMs ?? 0);
      const publisher = await connection.createConfirmChannel();
      const consumer = await connection.createChannel();
      const bridge = new Bridge(connection, publisher, consumer, options);
      await bridge.start();
      return bridge;
    } catch (e) {
      await connection.close().catch(() => {});
      throw e;
    }
  }

  /** The fleet's request queue under its prefix. */
  get requestQueue(): string {
    return `${this.options.prefix ?? ''}${REQUEST_QUEUE}`;
  }

  /**
   * Publishes a request and starts following it. Publishing the same `id`
   * again is safe: the fleet runs each id once.
   */
  async send(request: HandoffRequest, properties: { traceparent?: string } = {}): Promise<Handoff> {
    const handoff = this.follow(request.id);
    const headers = properties.traceparent === undefined ? {} : { traceparent: properties.traceparent };
    await this.publish(request.id, request, { replyTo: this.options.replyQueue, headers });
    return handoff;
  }

  /** Starts following a handoff sent earlier (by this process or before a restart). */
  follow(handoffId: string): Handoff {
    let handoff = this.handoffs.get(handoffId);
    if (handoff === undefined) {
      handoff = new Handoff(handoffId);
      this.handoffs.set(handoffId, handoff);
    }
    return handoff;
  }

  /** Answers an agent's question with what the user said. */
  async answer(question: BridgeQuestion, text: string): Promise<BridgeAnswer> {
    const answer: BridgeAnswer = {
      type: 'answer',
      id: `answer:${randomUUID()}`,
      handoffId: question.handoffId,
      questionId: question.questionId,
      text,
      at: new Date().toISOString(),
    };
    await this.publish(answer.id, answer, {});
    return answer;
  }

  /** Asks the fleet to stop a handoff; the bridge then gets `cancelled` and a reply. */
  async cancel(handoffId: string, reason?: string): Promise<BridgeCancel> {
    const cancel: BridgeCancel = { type: 'cancel', id: `cancel:${randomUUID()}`, handoffId, at: new Date().toISOString() };
    if (reason !== undefined) cancel.reason = reason;
    await this.publish(cancel.id, cancel, {});
    return cancel;
  }

  /** Publishes any body with the bridge's settings (tests use it to send what a broken bridge would). */
  async publishRaw(queue: string, messageId: string, body: Buffer, extra: Options.Publish = {}): Promise<void> {
    await this.confirm(queue, messageId, body, extra);
  }

  async close(): Promise<void> {
    this.closing = true;
    await this.handling;
    await this.connection.close();
  }

  private async start(): Promise<void> {
    // A channel the broker closes (an error on it) fails what waits on it;
    // without a listener the error would end the process.
    this.publisher.on('error', (e: Error) => this.log(`publishing channel: ${e.message}`));
    this.consumer.on('error', (e: Error) => this.log(`consuming channel: ${e.message}`));
    this.publisher.on('return', (m: Message) => {
      const id = messageIdOf(m);
      // A basic.return's fields carry its reason; amqplib's types leave them out.
      const why = m.fields as typeof m.fields & { replyCode?: number; replyText?: string };
      if (id !== undefined) this.returned.set(id, `${why.replyCode ?? '?'} ${why.replyText ?? 'returned'}`);
    });
    const durable = { durable: true, arguments: { 'x-queue-type': 'quorum' } };
    await this.consumer.assertQueue(this.options.replyQueue, durable);
    await this.consumer.prefetch(32);
    await this.consumer.consume(this.options.replyQueue, (m) => {
      if (m === null) return; // the broker cancelled the consumer (queue deleted)
      this.handling = this.handling.then(() => this.handle(m)).catch((e: unknown) => this.log(`a delivery could not be handled: ${String(e)}`));
    });
  }

  private async publish(messageId: string, body: object, extra: Options.Publish): Promise<void> {
    await this.confirm(this.requestQueue, messageId, Buffer.from(JSON.stringify(body)), extra);
  }

  /**
   * Publishes `mandatory` on the confirm channel and resolves once the broker
   * has taken the message. The broker sends a `basic.return` before the ack
   * of a message no queue took, so the return is known when the ack comes.
   * An id over 255 bytes (an AMQP short string) travels in a header instead.
   */
  private confirm(queue: string, messageId: string, body: Buffer, extra: Options.Publish): Promise<void> {
    const short = Buffer.byteLength(messageId) <= 255;
    const headers = { ...(extra.headers as Record<string, unknown> | undefined), ...(short ? {} : { 'x-baton-message-id': messageId }) };
    const properties: Options.Publish = {
      ...extra,
      headers,
      mandatory: true,
      persistent: true,
      contentType: 'application/json',
      // The connection's own user, which RabbitMQ checks: with [[bridges]] it
      // is how the fleet knows which bridge speaks (docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other).
      userId: connectionUser(this.options.url),
      ...(short ? { messageId } : {}),
    };
    return new Promise((resolve, reject) => {
      this.publisher.sendToQueue(queue, body, properties, (err: unknown) => {
        const returned = this.returned.get(messageId);
        this.returned.delete(messageId);
        if (err) reject(new NotDelivered(`the broker refused message ${messageId}: ${String(err)}`));
        else if (returned !== undefined) reject(new NotDelivered(`no queue took message ${messageId} (${returned})`));
        else resolve();
      });
    });
  }

  /**
   * One delivery, in arrival order: parse, drop repeats, strays and stale
   * statuses, hand it on, and only then remember it and ack. A handler that
   * throws (the chat is down) is retried in place with backoff rather than
   * nacked: a requeued message could come back after a later one of its
   * handoff, which would then be shown first.
   */
  private async handle(delivery: ConsumeMessage): Promise<void> {
    const verdict = this.judge(delivery);
    if (verdict.kind === 'drop') {
      this.dropped[verdict.reason] += 1;
      this.log(`dropped ${verdict.reason} message: ${verdict.detail}`);
      this.consumer.ack(delivery);
      return;
    }
    const { handoff, messageId, message } = verdict;
    if (!(await this.handOn(handoff, messageId, message))) return; // closing: unacked, it comes again
    if (message.type === 'status') this.order.accept(message);
    handoff.record(message);
    this.seen.remember(messageId);
    this.consumer.ack(delivery);
  }

  /** Calls `onMessage` until it succeeds (true) or the bridge closes (false). */
  private async handOn(handoff: Handoff, messageId: string, message: FleetMessage): Promise<boolean> {
    for (let delay = 100; ; delay = Math.min(delay * 2, 5_000)) {
      try {
        await this.options.onMessage?.(handoff, message);
        return true;
      } catch (e) {
        this.log(`handling ${messageId} failed, trying again in ${delay} ms: ${(e as Error).message}`);
      }
      if (this.closing) return false;
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  private judge(delivery: ConsumeMessage): { kind: 'drop'; reason: keyof DropCounts; detail: string } | { kind: 'take'; handoff: Handoff; messageId: string; message: FleetMessage } {
    let incoming;
    try {
      incoming = parseIncoming(delivery.content, delivery.properties);
    } catch (e) {
      if (e instanceof MalformedMessage) return { kind: 'drop', reason: 'malformed', detail: e.message };
      throw e;
    }
    const { messageId, correlationId, message } = incoming;
    if (this.seen.has(messageId)) return { kind: 'drop', reason: 'duplicate', detail: messageId };
    const handoff = this.handoffs.get(correlationId);
    if (handoff === undefined) return { kind: 'drop', reason: 'uncorrelated', detail: `${messageId} is about a handoff this bridge does not follow` };
    if (message.type === 'status' && !this.order.isNewer(message)) {
      return { kind: 'drop', reason: 'stale', detail: `status ${message.seq} of ${handoff.id} after ${this.order.latestSeq(handoff.id)}` };
    }
    return { kind: 'take', handoff, messageId, message };
  }

  private log(line: string): void {
    (this.options.log ?? console.warn)(line);
  }
}

function messageIdOf(m: Message): string | undefined {
  const id: unknown = m.properties.messageId ?? m.properties.headers?.['x-baton-message-id'];
  return typeof id === 'string' ? id : Buffer.isBuffer(id) ? id.toString('utf8') : undefined;
}

/**
 * Waits until the fleet has declared `queue`. A bridge checks it passively
 * and never declares the fleet's queues itself: declaring one with other
 * arguments than the fleet's fails with PRECONDITION_FAILED. A failed check
 * closes its channel, so each try gets a new one.
 */
async function waitForQueue(connection: ChannelModel, queue: string, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const probe = await connection.createChannel();
    probe.on('error', () => {});
    try {
      await probe.checkQueue(queue);
      await probe.close();
      return;
    } catch (e) {
      if (Date.now() >= deadline) throw new Error(`the fleet's queue ${queue} does not exist: is the fleet up? (${(e as Error).message})`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}
