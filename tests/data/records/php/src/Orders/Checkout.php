<?php
declare(strict_types=1);

namespace App\Orders;

use App\Payment\Gateway;

class OrderNotFoundException extends \RuntimeException
{
}

class StorageException extends \RuntimeException
{
}

final class Checkout
{
    public function __construct(private Gateway $gateway)
    {
    }

    public function place(int $orderId): void
    {
        $this->load($orderId);  // frame: place
    }

    public function settle(int $orderId): void
    {
        try {
            $this->gateway->charge($orderId, 1250);  // frame: settle
        } catch (\UnexpectedValueException $e) {
            throw new StorageException("could not load order $orderId", 0, $e);  // frame: settle
        }
    }

    private function load(int $orderId): array
    {
        throw new OrderNotFoundException("Order $orderId not found");  // frame: load
    }
}
