"""``make demo``: a page-view stream through a 3-broker replog cluster, a broker killed on the way.

Modules:

- :mod:`replog.demo.workload`: synthetic page-view events and the paced, idempotent
  producer that records when every record was sent and acknowledged;
- :mod:`replog.demo.query`: the PySpark Structured Streaming query (views per page per
  minute, read with ``format("replog")``, written to a topic and a parquet table);
- :mod:`replog.demo.check`: pure functions that compare the query's final counts with what
  the producer had acknowledged, and derive failover times and rates from timestamps;
- :mod:`replog.demo.chart`: the produce/consume rate chart;
- :mod:`replog.demo.run`: the orchestration (``python -m replog.demo``).
"""
