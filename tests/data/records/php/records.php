<?php
// Errors for tracehound's corpus of real error records, printed by PHP itself: run by
// ../generate.py as `php -n <settings> records.php <record> <case>`, so that PHP logs to
// stderr as the CLI does without an error_log file. Frames the tests expect are marked
// "frame:" on their line.
declare(strict_types=1);

require __DIR__ . '/src/Orders/Checkout.php';
require __DIR__ . '/src/Payment/Gateway.php';

fwrite(STDERR, "=== tracehound-record {$argv[1]} ===\n");
$checkout = new App\Orders\Checkout(new App\Payment\Gateway());
switch ($argv[2]) {
    case 'not-found':
        $checkout->place(42);  // frame: {main}
        break;
    case 'chained':
        $checkout->settle(42);  // frame: {main}
        break;
    case 'warning':
        $order = ['sku' => 'sku-001'];
        $coupon = $order['coupon'];
        break;
}
