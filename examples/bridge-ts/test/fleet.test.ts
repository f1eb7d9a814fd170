// The reference bridge against a live fleet (started by scripts/bridge-ts-test
// with examples/bridge-ts/test/profiles.toml).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { Webhook } from 'standardwebhooks';

import { Bridge, NotDelivered } from '../src/bridge.js';
import { startCallbackReceiver } from '../src/callbacks.js';
import type { BridgeStatus, ErrorCode, FleetMessage, StatusCallback } from '../src/contract.js';
import { isFailed } from '../src/replies.js';
import { fleetUnderTest, newId, request, until } from './fleet.js';

const REPLY_WITHIN_MS = 60_000;
const fleet = fleetUnderTest();
const logged: string[] = [];
let bridge: Bridge;

before(async () => {
  bridge = await Bridge.connect({
    url: fleet.url,
    prefix: fleet.prefix,
    replyQueue: `${fleet.prefix}bridge-ts.replies`,
    waitForFleetMs: 60_000,
    log: (line) => logged.push(line),
  });
});

after(async () => {
  await bridge?.close();
});

const seqs = (statuses: BridgeStatus[]) => statuses.map((s) => s.seq);
const kinds = (statuses: BridgeStatus[]) => statuses.map((s) => s.status);

describe('a bridge on a live fleet', () => {
  it('gets the demo chain\'s reply after its statuses, in seq order', async () => {
    const handoff = await bridge.send(request(newId('chain'), 'docs_agent'));
    const reply = await handoff.reply(REPLY_WITHIN_MS);
    assert.equal(reply.status, 'completed', reply.text);
    assert.equal(reply.handoffId, handoff.id);
    assert.deepEqual(reply.result?.agents, ['writer', 'editor', 'finalizer']);
    assert.match(reply.text, /museum/);
    assert.ok(reply.parts.length >= 1);
    assert.deepEqual(kinds(handoff.statuses), ['accepted', 'running', 'completed']);
    assert.deepEqual(seqs(handoff.statuses), [1, 2, 3]);
  });

  it('runs a request published twice once, and drops a message delivered twice', async () => {
    const req = request(newId('twice'), 'docs_agent');
    const handoff = await bridge.send(req);
    await bridge.send(req);
    const reply = await handoff.reply(REPLY_WITHIN_MS);
    assert.equal(reply.status, 'completed');
    assert.deepEqual(seqs(handoff.statuses), [1, 2, 3], 'one run: one accepted, one running, one completed');

    // The broker delivers at least once: the same reply again (same
    // message_id), then a stray message as a marker that the copy was read.
    const before = { ...bridge.dropped };
    const replyQueue = `${fleet.prefix}bridge-ts.replies`;
    const copy = Buffer.from(JSON.stringify(reply));
    await bridge.publishRaw(replyQueue, `reply:${handoff.id}`, copy, { correlationId: handoff.id });
    const stray: FleetMessage = { ...reply, handoffId: newId('stray') };
    await bridge.publishRaw(replyQueue, `reply:${stray.handoffId}`, Buffer.from(JSON.stringify(stray)), { correlationId: stray.handoffId });
    await until('the marker is read', () => bridge.dropped.uncorrelated > before.uncorrelated);
    assert.equal(bridge.dropped.duplicate, before.duplicate + 1);
    assert.equal(handoff.replies.length, 1, 'the copy never reached the chat');
  });

  it('tries a message again when forwarding it to the chat failed, keeping the order', async () => {
    let failures = 0;
    const forwarded: string[] = [];
    const flaky = await Bridge.connect({
      url: fleet.url,
      prefix: fleet.prefix,
      replyQueue: `${fleet.prefix}bridge-ts.flaky-replies`,
      log: (line) => logged.push(line),
      onMessage: (_handoff, message) => {
        if (message.type === 'status' && message.status === 'running' && failures++ === 0) throw new Error('the chat is down');
        forwarded.push(message.type === 'status' ? `status ${message.seq}` : message.type);
      },
    });
    try {
      const handoff = await flaky.send(request(newId('flaky'), 'docs_agent'));
      await handoff.reply(REPLY_WITHIN_MS);
      assert.equal(failures, 2, 'the failed status was handed on once more');
      assert.deepEqual(forwarded, ['status 1', 'status 2', 'status 3', 'reply']);
      assert.deepEqual(seqs(handoff.statuses), [1, 2, 3]);
    } finally {
      await flaky.close();
    }
  });

  it('says so when a message reaches no queue, instead of losing it', async () => {
    const nowhere = `${fleet.prefix}bridge-ts.no-such-queue`;
    await assert.rejects(bridge.publishRaw(nowhere, newId('lost'), Buffer.from('{}')), (e: unknown) => {
      assert.ok(e instanceof NotDelivered);
      assert.match(e.message, /NO_ROUTE/);
      return true;
    });
  });

  it('types the failed reply to a malformed request as a failure with its error', async () => {
    const id = newId('malformed');
    const { userIntent: _dropped, ...body } = request(id, 'docs_agent');
    const handoff = bridge.follow(id);
    await bridge.publishRaw(bridge.requestQueue, id, Buffer.from(JSON.stringify(body)), {
      replyTo: `${fleet.prefix}bridge-ts.replies`,
    });
    const reply = await handoff.reply(REPLY_WITHIN_MS);
    assert.ok(isFailed(reply), `expected a failed reply, got ${reply.status}`);
    // `reply.error` is not optional here: the guard narrowed the type, and
    // the code is one of the contract's closed set.
    const code: ErrorCode = reply.error.code;
    assert.equal(code, 'invalid_request');
    assert.match(reply.error.message, /userIntent/);
  });

  it('answers an agent\'s question, and the run goes on to its reply', async () => {
    const handoff = await bridge.send(request(newId('ask'), 'claude_code'));
    const question = await handoff.question(REPLY_WITHIN_MS);
    assert.equal(handoff.status, 'blocked', 'the blocked status comes before the question');
    assert.deepEqual(question.options, ['yes', 'not yet']);
    await bridge.answer(question, 'yes');
    const reply = await handoff.reply(REPLY_WITHIN_MS);
    assert.equal(reply.status, 'completed', reply.text);
    assert.deepEqual(kinds(handoff.statuses), ['accepted', 'running', 'blocked', 'running', 'completed']);
  });

  it('cancels a run waiting on its user, and hears it cancelled', async () => {
    const handoff = await bridge.send(request(newId('cancel'), 'claude_code'));
    await handoff.question(REPLY_WITHIN_MS);
    await bridge.cancel(handoff.id, 'the user changed their mind');
    const reply = await handoff.reply(REPLY_WITHIN_MS);
    assert.equal(reply.status, 'cancelled', reply.text);
    assert.equal(handoff.status, 'cancelled');
    assert.match(reply.text, /changed their mind/);
  });

  it('verifies the fleet\'s signed status callbacks and refuses a forged one', async () => {
    const heard: StatusCallback[] = [];
    const receiver = await startCallbackReceiver({ secret: fleet.callbackSecret, port: fleet.callbackPort, onStatus: (s) => heard.push(s) });
    try {
      const handoff = await bridge.send(request(newId('callback'), 'docs_agent', { statusUrl: receiver.url }));
      await handoff.reply(REPLY_WITHIN_MS);
      await until('every status is POSTed', () => heard.length >= handoff.statuses.length);
      const said = (s: { seq: number; status: string }) => `${s.seq} ${s.status}`;
      assert.deepEqual(heard.map(said), handoff.statuses.map(said), 'the callbacks say what the queue said, in order');
      assert.equal(receiver.rejected, 0);

      // Someone who knows the URL but not the secret.
      const body = JSON.stringify({ ...heard[0], status: 'completed' });
      const other = `whsec_${Buffer.from('not the secret the fleet was given').toString('base64')}`;
      const now = new Date();
      const forged = await fetch(receiver.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'webhook-id': 'msg_forged',
          'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
          'webhook-signature': new Webhook(other).sign('msg_forged', now, body),
        },
        body,
      });
      assert.equal(forged.status, 401);
      assert.equal(receiver.rejected, 1);
      assert.equal(heard.length, handoff.statuses.length, 'the forgery was not handed on');
    } finally {
      await receiver.close();
    }
  });
});
