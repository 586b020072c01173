// Orders arrive as JSON text.
export function parseOrder(text) {
  const order = JSON.parse(text);
  if (!Array.isArray(order.items)) {
    throw new TypeError("order without items");
  }
  return order;
}
