'use strict';
// winston with format.combine(format.errors({ stack: true }), format.timestamp(), format.json())
// on the Console transport (stdout). Run by ../generate.py; separators go to the same fd.
const fs = require('fs');
const { createLogger, format, transports } = require('winston');

const logger = createLogger({
  level: 'info',
  format: format.combine(format.errors({ stack: true }), format.timestamp(), format.json()),
  defaultMeta: { service: 'payments' },
  transports: [new transports.Console()],
});

function separator(stem) {
  fs.writeSync(1, `=== tracehound-record ${stem} ===\n`);
}

function applyCoupon(order) {
  return order.total - order.coupon.amount;
}

separator('winston--info');
logger.info('payments service started');

separator('winston--error-stack');
try {
  applyCoupon({ total: 100, coupon: null });
} catch (err) {
  logger.error(err);
}

separator('winston--error-no-trace');
logger.error('refund rejected for order 42', { orderId: 42 });

separator('winston--warn');
logger.warn('gateway latency high', { ms: 2300 });
