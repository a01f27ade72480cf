"""Deterministic simulation of one replicated partition over the sans-IO replication core.

``network`` (virtual clock, event queue, a lossy network), ``controller`` (a
ZooKeeper + controller stand-in), ``broker`` (a minimal IO layer per replica
that drives ``LeaderState`` / ``FollowerState``), ``world`` (faults, producers,
invariants checked after every step, replayable traces).
"""
