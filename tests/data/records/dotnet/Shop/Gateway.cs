using System.Collections.Generic;

namespace Shop.Payments
{
    public class Gateway
    {
        public int Charge(int orderId, IDictionary<string, int> prices)
        {
            return Total(prices); // frame: Charge
        }

        private static int Total(IDictionary<string, int> prices)
        {
            return prices["sku-001"] * 2; // frame: Total
        }
    }
}
