using System;
using System.Collections.Generic;
using Shop.Payments;

namespace Shop.Orders
{
    public class Checkout
    {
        private readonly Gateway gateway = new Gateway();

        public void Place(int orderId)
        {
            try
            {
                gateway.Charge(orderId, null); // frame: Place
            }
            catch (NullReferenceException e)
            {
                throw new InvalidOperationException("Order " + orderId + " could not be placed.", e); // frame: Place
            }
        }
    }
}
