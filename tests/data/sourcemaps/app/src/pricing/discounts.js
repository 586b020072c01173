// Discount codes and what they take off a line.
const RULES = {
  NONE: { percent: 0 },
  "SPRING-20": { percent: 20 },
};

export function applyDiscount(line, code) {
  const rule = RULES[code];
  // A code that is not in RULES (an expired campaign's) leaves rule undefined.
  const off = Math.round((line.cents * rule.percent) / 100);
  return { ...line, cents: line.cents - off };
}
