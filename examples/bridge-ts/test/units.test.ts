// The bridge's pure parts, without a fleet.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';

import type { BridgeReply, BridgeStatus } from '../src/contract.js';
import { SeenMessageIds } from '../src/dedup.js';
import { Handoff } from '../src/handoff.js';
import { MalformedMessage, parseIncoming } from '../src/incoming.js';
import { StatusOrder } from '../src/order.js';
import { isFailed } from '../src/replies.js';
import { Bridge, connectionUser } from '../src/bridge.js';
import { startCallbackReceiver, verifyStatusCallback, WebhookVerificationError } from '../src/callbacks.js';

const status = (handoffId: string, seq: number, s: BridgeStatus['status'] = 'running'): BridgeStatus => ({
  type: 'status',
  handoffId,
  status: s,
  seq,
  at: '2026-11-30T19:00:00Z',
});

describe('the user a bridge publishes as (user_id, docs/bridge-protocol.md#bridges-that-cannot-speak-for-each-other)', () => {
  it('is the connection URL\'s own user, decoded, or guest', () => {
    assert.equal(connectionUser('amqp://wechat-bridge:pw@127.0.0.1:5672/%2f'), 'wechat-bridge');
    assert.equal(connectionUser('amqp://we%40chat:pw@host/%2f'), 'we@chat');
    assert.equal(connectionUser('amqp://127.0.0.1:5672'), 'guest');
  });
});

describe('de-duplication by message_id', () => {
  it('remembers an id once and forgets the oldest beyond its capacity', () => {
    const seen = new SeenMessageIds(2);
    assert.equal(seen.remember('a'), true);
    assert.equal(seen.remember('a'), false);
    seen.remember('b');
    seen.remember('c');
    assert.equal(seen.has('a'), false);
    assert.equal(seen.has('c'), true);
  });
});

describe('ordering by seq', () => {
  it('accepts each handoff\'s statuses only forward', () => {
    const order = new StatusOrder();
    assert.equal(order.accept(status('h1', 1)), true);
    assert.equal(order.accept(status('h1', 3)), true);
    assert.equal(order.accept(status('h1', 2)), false, 'an older status after a newer one is stale');
    assert.equal(order.accept(status('h1', 3)), false);
    assert.equal(order.accept(status('h2', 1)), true, 'handoffs are independent');
    assert.equal(order.latestSeq('h1'), 3);
  });
});

describe('parsing what the fleet sends', () => {
  const body = (v: unknown) => Buffer.from(JSON.stringify(v));

  it('reads ids from the properties, or from the headers when they are too long for AMQP', () => {
    const long = 'é'.repeat(128);
    const parsed = parseIncoming(body(status(long, 1)), {
      headers: { 'x-baton-message-id': Buffer.from(`status:${long}:1`), 'x-baton-correlation-id': long },
    });
    assert.equal(parsed.messageId, `status:${long}:1`);
    assert.equal(parsed.correlationId, long);
    assert.equal(parsed.message.type, 'status');
  });

  it('refuses a body whose correlation_id is another handoff\'s, or that is not a fleet message', () => {
    assert.throws(() => parseIncoming(body(status('h1', 1)), { messageId: 'm', correlationId: 'h2' }), MalformedMessage);
    assert.throws(() => parseIncoming(Buffer.from('{'), { messageId: 'm' }), MalformedMessage);
    assert.throws(() => parseIncoming(body({ type: 'gossip', handoffId: 'h' }), { messageId: 'm' }), MalformedMessage);
    assert.throws(() => parseIncoming(body(status('h1', 1)), {}), /no message_id/);
  });
});

describe('a bridge\'s reply queue', () => {
  it('may not be named like a fleet queue, which the fleet would refuse as reply_to', async () => {
    for (const replyQueue of ['baton.replies', 't1.baton.replies']) {
      await assert.rejects(Bridge.connect({ url: 'amqp://127.0.0.1:1', prefix: 't1.', replyQueue }), RangeError);
    }
  });
});

describe('a handoff\'s record', () => {
  it('hands a waiter a message already heard, or the next one that matches', async () => {
    const h = new Handoff('h1');
    h.record(status('h1', 1, 'accepted'));
    assert.equal((await h.reached('accepted', 10)).seq, 1);
    const running = h.reached('running', 1000);
    h.record(status('h1', 2, 'running'));
    assert.equal((await running).seq, 2);
    await assert.rejects(h.reply(20), /nothing matching within 20 ms \(heard: status 1 accepted, status 2 running\)/);
  });
});

describe('a failed reply', () => {
  it('narrows to a type whose error is always there', () => {
    const reply: BridgeReply = {
      type: 'reply',
      handoffId: 'h',
      status: 'failed',
      language: 'en',
      text: 'Sorry',
      parts: ['Sorry'],
      error: { code: 'invalid_request', message: 'field `userIntent` is missing' },
      at: '2026-11-30T19:00:00Z',
    };
    assert.ok(isFailed(reply));
    // Compiles only because the guard narrowed `error` to non-optional.
    const code: string = reply.error.code;
    assert.equal(code, 'invalid_request');
    assert.equal(isFailed({ ...reply, status: 'completed' }), false);
  });
});

describe('signed status callbacks', () => {
  const secret = `whsec_${Buffer.from('a secret of thirty-two bytes!!!!').toString('base64')}`;
  const signed = (payload: string, id = 'msg_1', at = new Date()) => ({
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(secret).sign(id, at, payload),
  });
  const payload = JSON.stringify(status('h1', 2));

  it('accepts a callback signed with the secret', () => {
    assert.deepEqual(verifyStatusCallback(secret, signed(payload), Buffer.from(payload)), status('h1', 2));
  });

  it('rejects a changed body, another secret, and an old request replayed', () => {
    const tampered = payload.replace('running', 'completed');
    assert.throws(() => verifyStatusCallback(secret, signed(payload), Buffer.from(tampered)), WebhookVerificationError);
    const other = `whsec_${Buffer.from('another secret, also 32 bytes!!!').toString('base64')}`;
    const forged = { ...signed(payload), 'webhook-signature': new Webhook(other).sign('msg_1', new Date(), payload) };
    assert.throws(() => verifyStatusCallback(secret, forged, Buffer.from(payload)), WebhookVerificationError);
    const old = signed(payload, 'msg_1', new Date(Date.now() - 3_600_000));
    assert.throws(() => verifyStatusCallback(secret, old, Buffer.from(payload)), WebhookVerificationError);
    assert.throws(() => verifyStatusCallback(secret, {}, Buffer.from(payload)), WebhookVerificationError);
  });

  it('serves 204 for a signed POST (handed on once per webhook-id) and 401 for a forged one', async () => {
    const heard: BridgeStatus[] = [];
    const receiver = await startCallbackReceiver({ secret, onStatus: (s) => heard.push(s) });
    try {
      const post = (headers: Record<string, string>) =>
        fetch(receiver.url, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: payload });
      const good = signed(payload);
      assert.equal((await post(good)).status, 204);
      assert.equal((await post(good)).status, 204, 'a repeat is answered but not handed on');
      assert.equal((await post({ ...good, 'webhook-signature': 'v1,AAAA' })).status, 401);
      assert.deepEqual(heard, [status('h1', 2)]);
      assert.equal(receiver.rejected, 1);
    } finally {
      await receiver.close();
    }
  });
});
