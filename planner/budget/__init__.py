"""The budget of one device: card memory, the engine's usable share, weights, start-up
reservations, the state pool and the requests that fit, each step with its source."""
