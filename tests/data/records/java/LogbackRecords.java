package com.shop.orders;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** SLF4J on logback-classic, configured by logback.xml (PatternLayout with %ex, stderr). */
public final class LogbackRecords implements Runnable {
    private static final Logger LOG = LoggerFactory.getLogger("com.shop.orders.PaymentService");

    @Override
    public void run() {
        RecordsMain.separator("logback--info");
        LOG.info("payment service started");

        RecordsMain.separator("logback--error-with-cause");
        try {
            PaymentGateway.pay(42);
        } catch (IllegalStateException e) {
            LOG.error("charge failed for order {}", 42, e);
        }

        RecordsMain.separator("logback--warn");
        LOG.warn("retrying charge for order {} in {} ms", 42, 500);
    }
}
