"""Training rooms: a game day for several teams at once, each with its own lab, and the
facilitator's console over them (`stormlab room`), locally or on docker compose."""
