// What a cart costs once the order's discount code is applied to every line.
import { applyDiscount } from "./discounts.js";

export function cartTotal(cart, code) {
  const priced = cart.lines().map((line) => applyDiscount(line, code));
  return priced.reduce((sum, line) => sum + line.cents, 0);
}
