package com.shop.orders;

final class Checkout {
    int submit(int[] quantities, int lines) {
        return total(quantities, lines);
    }

    private int total(int[] quantities, int lines) {
        int sum = 0;
        for (int i = 0; i <= lines; i++) {
            sum += quantities[i];  // ArrayIndexOutOfBoundsException once i == length
        }
        return sum;
    }
}
