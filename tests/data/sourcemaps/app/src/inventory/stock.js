// Stock on hand per product, reserved as orders are placed.
export class Stock {
  constructor(levels) {
    this.levels = new Map(Object.entries(levels));
  }

  reserve(sku, qty) {
    const have = this.levels.get(sku) ?? 0;
    if (qty > have) {
      throw new RangeError(`insufficient stock for ${sku}: want ${qty}, have ${have}`);
    }
    this.levels.set(sku, have - qty);
  }
}

export const defaultStock = new Stock({ "A-1": 10, "B-7": 12 });
