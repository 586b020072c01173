package com.shop.orders;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Log4j 2 configured by log4j2.xml (stderr): logger "com.shop.orders.InventoryService" uses a
 * PatternLayout with %ex; logger "com.shop.orders.Reports" a pattern without any throwable
 * converter, so Log4j 2 appends its default extended one (%xEx, with "~[classes/:?]").
 */
public final class Log4j2Records implements Runnable {
    private static final Logger LOG = LogManager.getLogger("com.shop.orders.InventoryService");
    private static final Logger REPORTS = LogManager.getLogger("com.shop.orders.Reports");

    @Override
    public void run() {
        RecordsMain.separator("log4j2--info");
        LOG.info("inventory service started");

        RecordsMain.separator("log4j2--error-with-cause");
        try {
            PaymentGateway.pay(43);
        } catch (IllegalStateException e) {
            LOG.error("charge failed for order {}", 43, e);
        }

        RecordsMain.separator("log4j2--error-extended");
        try {
            new Inventory().reserve("sku-404", 1);
        } catch (NullPointerException e) {
            REPORTS.error("stock report failed", e);
        }

        RecordsMain.separator("log4j2--warn");
        LOG.warn("stock for {} is low: {}", "sku-002", 1);
    }
}
