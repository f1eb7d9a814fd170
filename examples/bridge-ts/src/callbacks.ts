import { createServer } from 'node:http';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';

import type { StatusCallback } from './contract.js';
import { SeenMessageIds } from './dedup.js';

export { WebhookVerificationError };

/** The largest callback body read; a status is a few hundred bytes. */
const MAX_BODY_BYTES = 64 * 1024;

/**
 * Verifies a status callback signed the Standard Webhooks way: the
 * HMAC-SHA256 in `webhook-signature` must cover `webhook-id`,
 * `webhook-timestamp` and the exact body bytes, with the secret the profiles
 * file gives this source, and the timestamp must be within five minutes of
 * now (an old request replayed is refused). Throws `WebhookVerificationError`
 * for a forgery.
 */
export function verifyStatusCallback(secret: string, headers: IncomingHttpHeaders, rawBody: Buffer): StatusCallback {
  const signed = {
    'webhook-id': single(headers['webhook-id']),
    'webhook-timestamp': single(headers['webhook-timestamp']),
    'webhook-signature': single(headers['webhook-signature']),
  };
  return new Webhook(secret).verify(rawBody, signed) as StatusCallback;
}

export interface CallbackReceiver {
  /** Where the fleet should POST: put it in the request's `callback.statusUrl`. */
  url: string;
  /** Callbacks refused as forged, replayed or malformed. */
  rejected: number;
  close(): Promise<void>;
}

/**
 * An HTTP endpoint for status callbacks: a verified callback is handed to
 * `onStatus` once per `webhook-id` (the fleet may send one again after a
 * timeout) and answered 204; anything else gets 401 and is not handed on.
 */
export async function startCallbackReceiver(options: {
  secret: string;
  onStatus: (status: StatusCallback, webhookId: string) => void;
  host?: string;
  port?: number;
}): Promise<CallbackReceiver> {
  const seen = new SeenMessageIds();
  const receiver = { url: '', rejected: 0, close: () => Promise.resolve() };
  const server = createServer((req, res) => {
    // A body that is not JSON, or a broken connection, is a 400 like any refusal.
    void receive(req, options.secret, seen, options.onStatus).catch(() => 400).then((code) => {
      if (code !== 204) receiver.rejected += 1;
      res.writeHead(code).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve));
  const { address, port } = server.address() as AddressInfo;
  receiver.url = `http://${address}:${port}/baton/status`;
  receiver.close = () => new Promise<void>((resolve, reject) => server.close((e) => (e ? reject(e) : resolve())));
  return receiver;
}

/** Verifies one POST and answers with the HTTP status to send. */
async function receive(
  req: IncomingMessage,
  secret: string,
  seen: SeenMessageIds,
  onStatus: (status: StatusCallback, webhookId: string) => void,
): Promise<number> {
  if (req.method !== 'POST') return 405;
  const body = await readBody(req);
  if (body === undefined) return 413;
  let status: StatusCallback;
  try {
    status = verifyStatusCallback(secret, req.headers, body);
  } catch (e) {
    if (e instanceof WebhookVerificationError) return 401;
    throw e;
  }
  const webhookId = single(req.headers['webhook-id']);
  if (seen.remember(webhookId)) onStatus(status, webhookId);
  return 204;
}

async function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function single(value: string | string[] | undefined): string {
  return (Array.isArray(value) ? value[0] : value) ?? '';
}
