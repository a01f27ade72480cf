"""One handler per Kafka API, named after it (``handle_produce``, ``handle_fetch``...)."""
