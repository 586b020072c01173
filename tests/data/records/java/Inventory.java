package com.shop.orders;

import java.util.HashMap;
import java.util.Map;

final class Inventory {
    private final Map<String, Integer> stock = new HashMap<>();

    int reserve(String sku, int quantity) {
        int left = stock.get(sku) - quantity;  // NullPointerException for an unknown sku
        stock.put(sku, left);
        return left;
    }
}
