package com.shop.orders;

import java.util.logging.Level;
import java.util.logging.Logger;

/** java.util.logging with the JDK's default ConsoleHandler and SimpleFormatter (stderr). */
final class JulRecords implements Runnable {
    private static final Logger LOG = Logger.getLogger("com.shop.orders.OrderService");

    @Override
    public void run() {
        RecordsMain.separator("java-jul--info");
        LOG.info("order service started");

        RecordsMain.separator("java-jul--severe-with-cause");
        try {
            OrderParser.parse("42", "4x2");
        } catch (IllegalStateException e) {
            LOG.log(Level.SEVERE, "order placement failed", e);
        }

        RecordsMain.separator("java-jul--warning");
        LOG.warning("stock for sku-002 is low");
    }
}
