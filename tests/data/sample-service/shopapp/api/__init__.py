"""HTTP layer of the shop API."""
