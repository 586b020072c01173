package com.shop.orders;

final class OrderParser {
    static int quantity(String raw) {
        return Integer.parseInt(raw);
    }

    static int parse(String orderId, String raw) {
        try {
            return quantity(raw);
        } catch (NumberFormatException e) {
            throw new IllegalStateException("could not parse quantity for order " + orderId, e);
        }
    }
}
