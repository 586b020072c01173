// The shop's entry point: `node src/index.js <scenario>` places one order that fails the way
// the scenario names (discount, stock, payment, parse, cart), uncaught, as a real service would.
import { placeOrder } from "./checkout/checkout.js";

const ORDERS = {
  discount: '{"items": [{"sku": "A-1", "qty": 2, "cents": 1250}], "code": "SPRING-50"}',
  stock: '{"items": [{"sku": "B-7", "qty": 40, "cents": 300}], "code": "NONE"}',
  payment: '{"items": [{"sku": "A-1", "qty": 1, "cents": 99999}], "code": "NONE"}',
  parse: '{"items": [{"sku": "A-1", "qty": 1, "cents": 10}], "code": ',
  cart: '{"items": [{"qty": 1, "cents": 10}], "code": "NONE"}',
};

async function main(scenario) {
  const order = ORDERS[scenario];
  if (order === undefined) {
    throw new Error(`unknown scenario ${scenario}`);
  }
  const receipt = await placeOrder(order);
  console.log(receipt);
}

main(process.argv[2]);
