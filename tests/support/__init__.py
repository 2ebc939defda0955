"""Helpers the tests share (imported as `support.<module>`); no test module imports another."""
