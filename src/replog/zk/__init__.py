"""ZooKeeper: Kafka's znode layout and JSON codecs (``data``), session and watch
plumbing over kazoo (``ops``), and the typed client brokers and the controller share
(``client``). Imports nothing above ``protocol`` and ``storage``."""
