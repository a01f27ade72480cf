"""The bottom layer: small names every other package shares (the clock, the internal
topics). It imports nothing of replog."""
