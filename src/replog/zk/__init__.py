"""ZooKeeper: Kafka's znode layout and JSON codecs (``data``), session and watch
plumbing over kazoo (``ops``), the typed client brokers and the controller share
(``client``), and the controller-epoch fence with its rules (``fencing``). Imports
nothing above ``protocol`` and ``storage``."""
