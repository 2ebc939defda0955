"""The end-to-end run of the real `pulumi up` on a simulated data centre (docs/testing.md)."""
