import type { FleetMessage } from './contract.js';

/** The AMQP properties a bridge reads from what the fleet sends it. */
export interface DeliveredProperties {
  messageId?: unknown;
  correlationId?: unknown;
  headers?: Record<string, unknown> | undefined;
}

/** One message from the fleet, parsed once at the edge. */
export interface Incoming {
  /** The deterministic key to drop repeats by (`status:<id>:<seq>`, `reply:<id>` …). */
  messageId: string;
  /** The `id` of the request this message is about. */
  correlationId: string;
  message: FleetMessage;
}

export class MalformedMessage extends Error {
  override readonly name = 'MalformedMessage';
}

/**
 * Parses a delivery. An id of more than 255 bytes does not fit an AMQP short
 * string, so the fleet leaves the property out and sends the full value in
 * the header `x-baton-message-id` / `x-baton-correlation-id`: read both.
 */
export function parseIncoming(body: Buffer, properties: DeliveredProperties): Incoming {
  const messageId = property(properties.messageId) ?? header(properties.headers, 'x-baton-message-id');
  if (messageId === undefined) throw new MalformedMessage('no message_id');
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch (e) {
    throw new MalformedMessage(`body is not JSON: ${(e as Error).message}`);
  }
  const message = asFleetMessage(parsed);
  const correlationId = property(properties.correlationId) ?? header(properties.headers, 'x-baton-correlation-id') ?? message.handoffId;
  if (correlationId !== message.handoffId) {
    throw new MalformedMessage(`correlation_id ${correlationId} does not match handoffId ${message.handoffId}`);
  }
  return { messageId, correlationId, message };
}

/**
 * Checks the discriminant and the keys every bridge relies on; the rest of
 * the shape is the generated contract's promise (validate it against
 * contract/schema with a JSON Schema validator for a stricter bridge).
 */
function asFleetMessage(value: unknown): FleetMessage {
  if (typeof value !== 'object' || value === null) throw new MalformedMessage('body is not a JSON object');
  const v = value as Record<string, unknown>;
  if (typeof v['handoffId'] !== 'string') throw new MalformedMessage('no handoffId');
  switch (v['type']) {
    case 'status':
      if (typeof v['seq'] !== 'number' || typeof v['status'] !== 'string') throw new MalformedMessage('a status needs seq and status');
      break;
    case 'reply':
      if (typeof v['status'] !== 'string' || !Array.isArray(v['parts'])) throw new MalformedMessage('a reply needs status and parts');
      break;
    case 'question':
      if (typeof v['questionId'] !== 'string') throw new MalformedMessage('a question needs questionId');
      break;
    default:
      throw new MalformedMessage(`unknown type ${JSON.stringify(v['type'])}`);
  }
  return value as FleetMessage;
}

function property(value: unknown): string | undefined {
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

function header(headers: Record<string, unknown> | undefined, name: string): string | undefined {
  const value = headers?.[name];
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return property(value);
}
