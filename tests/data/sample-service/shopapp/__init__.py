"""shopapp: the orders API behind the shop front (service name ``shop-api``)."""

__version__ = "2.7.1"
