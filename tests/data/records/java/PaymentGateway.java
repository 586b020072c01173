package com.shop.orders;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.SocketTimeoutException;

final class PaymentGateway {
    static void read() throws SocketTimeoutException {
        throw new SocketTimeoutException("Read timed out");
    }

    static void charge(int orderId) {
        try {
            read();
        } catch (IOException e) {
            throw new UncheckedIOException("payment gateway unreachable", e);
        }
    }

    static void pay(int orderId) {
        try {
            charge(orderId);
        } catch (RuntimeException e) {
            throw new IllegalStateException("payment failed for order " + orderId, e);
        }
    }
}
