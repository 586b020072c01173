'use strict';
// console.error(err) of an Error with a `cause`: Node's util.inspect prints the stack, then the
// cause as `[cause]: ...` inside braces. Run by ../generate.py; the separator line is dropped.
const fs = require('fs');

function loadCustomer(order) {
  return order.customer.id;
}

function loadOrder(id) {
  const order = { id, customer: undefined };
  try {
    return loadCustomer(order);
  } catch (err) {
    throw new Error(`could not load order ${id}`, { cause: err });
  }
}

fs.writeSync(2, '=== tracehound-record node--console-error-cause ===\n');
try {
  loadOrder(42);
} catch (err) {
  console.error(err);
}
