"""Order confirmation e-mails, sent over SMTP when enabled in the settings."""

from __future__ import annotations

import logging
import smtplib
from email.message import EmailMessage

from shopapp.config import Settings
from shopapp.locale import get_messages
from shopapp.models import Order
from shopapp.utils.money import format_cents

log = logging.getLogger(__name__)


class EmailNotifier:
    """Builds and sends the e-mail a customer receives once an order is confirmed."""

    def __init__(self, settings: Settings, language: str = "en") -> None:
        self._settings = settings
        self._messages = get_messages(language)

    def build_order_confirmation(self, order: Order) -> EmailMessage:
        """Render the confirmation: one row per line with its price and discount, then totals."""
        currency = self._settings.currency
        rows = []
        for line in order.lines:
            row = f"{line.quantity} x {line.sku}  {format_cents(line.total_cents, currency)}"
            if line.discount_cents:
                row += f"  (-{format_cents(line.discount_cents, currency)})"
            rows.append(row)
        rows += [
            "",
            f"{self._messages['subtotal']}: {format_cents(order.subtotal_cents, currency)}",
            f"{self._messages['discount']}: -{format_cents(order.discount_cents, currency)}",
            f"{self._messages['shipping']}: {format_cents(order.shipping_cents, currency)}",
            f"{self._messages['total']}: {format_cents(order.total_cents, currency)}",
        ]
        message = EmailMessage()
        message["From"] = self._settings.sender_address
        message["To"] = order.customer.email
        message["Subject"] = f"{self._messages['order_confirmed']} ({order.order_id})"
        greeting = f"{self._messages['greeting']} {order.customer.name},"
        message.set_content(greeting + "\n\n" + "\n".join(rows))
        return message

    def send_order_confirmation(self, order: Order) -> None:
        """Send the confirmation, or only log it when e-mail is disabled (dev and tests)."""
        message = self.build_order_confirmation(order)
        if not self._settings.email_enabled:
            log.info("email disabled, not sending %r to %s", message["Subject"], message["To"])
            return
        host, port = self._settings.smtp_host, self._settings.smtp_port
        try:
            with smtplib.SMTP(host, port, timeout=10) as smtp:
                smtp.send_message(message)
        except (OSError, smtplib.SMTPException):
            # A lost confirmation must not fail the order; the outbox job retries later.
            log.exception("could not send confirmation for order %s", order.order_id)
