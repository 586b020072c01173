// Charging cards through the payment provider (a limit stands in for its decline rules).
export class PaymentDeclined extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = "PaymentDeclined";
  }
}

export class PaymentGateway {
  constructor({ limitCents }) {
    this.limitCents = limitCents;
  }

  async charge(cents, token) {
    try {
      return await this.authorize(cents, token);
    } catch (err) {
      throw new PaymentDeclined(`charge of ${cents} cents declined`, { cause: err });
    }
  }

  async authorize(cents, token) {
    await new Promise((resolve) => setTimeout(resolve, 1));
    if (cents > this.limitCents) {
      throw new Error(`amount over limit for ${token}`);
    }
    return { id: `ch_${cents}`, cents };
  }
}
