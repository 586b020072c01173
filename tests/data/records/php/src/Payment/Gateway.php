<?php
declare(strict_types=1);

namespace App\Payment;

final class Gateway
{
    public function charge(int $orderId, int $cents): void
    {
        $this->send(['order' => $orderId, 'amount' => $cents]);  // frame: charge
    }

    private function send(array $payload): void
    {
        throw new \UnexpectedValueException('gateway answered 502 for order ' . $payload['order']);  // frame: send
    }
}
