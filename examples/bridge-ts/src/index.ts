// A reference bridge for Baton. See README.md beside this package.
export * from './bridge.js';
export * from './callbacks.js';
export * from './contract.js';
export * from './dedup.js';
export * from './handoff.js';
export * from './incoming.js';
export * from './order.js';
export * from './replies.js';
