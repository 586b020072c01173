'use strict';
// pino's default JSON lines on stdout (numeric levels; `err` serialized as {type, message,
// stack}). Run by ../generate.py. The destination is pino's own stdout one made synchronous:
// the default asynchronous one can write its first chunk after the rest when the process
// exits right away (seen here: the first separator line came out last), and the separators
// must stay in order. The records are the same bytes either way.
const pino = require('pino');

const destination = pino.destination({ dest: 1, sync: true });
const logger = pino({ name: 'checkout' }, destination);

function separator(stem) {
  destination.write(`=== tracehound-record ${stem} ===\n`);
}

function reserve(sku, stock) {
  if (!(sku in stock)) {
    throw new RangeError(`unknown sku ${sku}`);
  }
  return stock[sku];
}

function checkout(orderId) {
  try {
    reserve('sku-404', { 'sku-001': 3 });
  } catch (err) {
    throw new Error(`checkout failed for order ${orderId}`, { cause: err });
  }
}

separator('pino--info');
logger.info('checkout service started');

separator('pino--error-with-cause');
try {
  checkout(42);
} catch (err) {
  logger.error(err, 'checkout failed');
}

separator('pino--error-no-trace');
logger.error({ orderId: 42 }, 'payment declined');

function connectQueue(host, port) {
  const err = new Error(`connect ECONNREFUSED ${host}:${port}`);
  err.code = 'ECONNREFUSED';
  throw err;
}

separator('pino--fatal');
try {
  connectQueue('127.0.0.1', 5672);
} catch (err) {
  logger.fatal({ err }, 'cannot reach the order queue, exiting');
}
