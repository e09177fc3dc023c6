"""Native session retry: the pure rules in `policy`, the engine built on them."""
