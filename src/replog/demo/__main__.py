"""``python -m replog.demo``: what ``make demo`` runs."""

from replog.demo.run import main

raise SystemExit(main())
