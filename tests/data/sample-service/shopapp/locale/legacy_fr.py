# -*- coding: latin-1 -*-
"""French messages carried over from the old PHP shop (Latin-1 encoded, do not re-save)."""

# Libellés hérités de l'ancienne boutique : ne pas ré-encoder ce fichier,
# l'export comptable les compare octet par octet.

MESSAGES: dict[str, str] = {
    "greeting": "Bonjour",
    "order_confirmed": "Votre commande est confirmée",
    "subtotal": "Sous-total",
    "discount": "Remise",
    "shipping": "Livraison",
    "total": "Total TTC",
}
