// Placing an order: parse it, build the cart, price it, reserve stock, charge the card.
import { Cart } from "./cart.js";
import { parseOrder } from "../util/parse.js";
import { cartTotal } from "../pricing/total.js";
import { defaultStock } from "../inventory/stock.js";
import { PaymentGateway } from "../payments/gateway.js";

const gateway = new PaymentGateway({ limitCents: 50000 });

export async function placeOrder(text) {
  const order = parseOrder(text);
  const cart = new Cart(order.items);
  const total = cartTotal(cart, order.code);
  for (const item of cart.items) {
    defaultStock.reserve(item.sku, item.qty);
  }
  const receipt = await gateway.charge(total, "tok_visa");
  return { ...receipt, items: cart.items.length };
}
