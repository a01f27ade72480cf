"""Security: principals, SASL mechanisms, TLS settings and ACL rules (pure cores).

At the bottom of the layers (beside ``protocol``), so both the broker's listener and
replog's own client (inter-broker connections) can use them.
"""
