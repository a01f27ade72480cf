"""Broker services that keep their state in an internal topic (Kafka's coordinators)."""
