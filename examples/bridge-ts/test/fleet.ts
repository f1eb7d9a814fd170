// What the fleet tests share: the fleet's address from the environment that
// scripts/bridge-ts-test sets, and a request like a WeChat bridge's.
import { randomUUID } from 'node:crypto';

import type { HandoffRequest } from '../src/contract.js';

export interface Fleet {
  url: string;
  prefix: string;
  /** The callback secret the test's profiles file gives source `weixin`. */
  callbackSecret: string;
  /** The port of the callback origin the test's profiles file allows. */
  callbackPort: number;
}

/** The fleet under test; refuses to run against a default (production) prefix. */
export function fleetUnderTest(): Fleet {
  const prefix = process.env['BATON_QUEUE_PREFIX'];
  const callbackSecret = process.env['BRIDGE_TS_CALLBACK_SECRET'];
  const callbackPort = Number(process.env['BRIDGE_TS_CALLBACK_PORT']);
  if (!prefix || !callbackSecret || !callbackPort) {
    throw new Error(
      'these tests run against a live fleet: start them with scripts/bridge-ts-test ' +
        '(it sets BATON_QUEUE_PREFIX, BRIDGE_TS_CALLBACK_SECRET and BRIDGE_TS_CALLBACK_PORT)',
    );
  }
  return { url: process.env['AMQP_URL'] || 'amqp://guest:guest@127.0.0.1:5672/%2f', prefix, callbackSecret, callbackPort };
}

/** A fresh request id. */
export function newId(what: string): string {
  return `bridge-ts-${what}-${randomUUID().slice(0, 8)}`;
}

/** A WeChat-style request; each gets its own conversation, so tests never queue behind each other. */
export function request(id: string, targetAgent: HandoffRequest['targetAgent'], callback: HandoffRequest['callback'] = {}): HandoffRequest {
  const now = new Date().toISOString();
  return {
    id,
    source: 'weixin',
    targetAgent,
    status: 'requested',
    userIntent: 'Write a short note to parents about Friday\'s museum trip.',
    taskType: 'docs_task',
    priority: 'normal',
    context: {
      id: `ctx_${id}`,
      userId: 'user_bridge_ts',
      recentConversation: [{ role: 'user', content: 'Can you draft the museum trip note?', createdAt: now }],
      userMemories: [],
      projectMemories: [],
      redactions: [],
    },
    constraints: {
      language: 'en',
      allowedActions: ['draft_text'],
      forbiddenActions: [],
      requireConfirmationFor: ['publish'],
    },
    callback: { replyToChatId: `chat-${id}`, ...callback },
    conversationKey: `conversation-${id}`,
    createdAt: now,
    updatedAt: now,
  };
}

/** Waits until `check` holds, polling briefly, or fails after `withinMs`. */
export async function until(what: string, check: () => boolean, withinMs = 10_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
