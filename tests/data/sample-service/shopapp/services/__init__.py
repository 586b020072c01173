"""Business logic of the orders service: ordering, pricing and stock."""
