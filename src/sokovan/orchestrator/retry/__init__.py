"""Native session retry (seed 004): the pure rules in `policy`, the engine built on them."""
