// A cart holds order lines; every line must name the product it sells.
export class Cart {
  constructor(items) {
    for (const item of items) {
      if (typeof item.sku !== "string") {
        throw new Error(`cart item without sku: ${JSON.stringify(item)}`);
      }
    }
    this.items = items.map((item) => ({ ...item }));
  }

  lines() {
    return this.items.map((item) => ({ sku: item.sku, cents: item.cents * item.qty }));
  }
}
