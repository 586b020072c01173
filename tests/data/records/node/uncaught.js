'use strict';
// An exception nobody catches: Node prints the throwing source line with a caret, the error,
// its stack and a `Node.js v...` footer, and exits 1. Run by ../generate.py.
const fs = require('fs');

function lineTotal(line) {
  return line.price.amount * line.quantity;
}

function orderTotal(order) {
  return order.lines.map(lineTotal).reduce((a, b) => a + b, 0);
}

fs.writeSync(2, '=== tracehound-record node--uncaught ===\n');
orderTotal({ id: 42, lines: [{ quantity: 1, price: { amount: 5 } }, { quantity: 2 }] });
